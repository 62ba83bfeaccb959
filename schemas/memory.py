"""Authoritative memory: entries, authorities, write operations and their typed results.

Authority decides who may write what (see `loreguard.memory.authority`):
canonical facts (Designer, immutable) > world state (Designer, GameSystem) >
episodic memory and beliefs (ValidatedOutput and above). A model's raw suggestion
(LlmSuggestion) may write nothing.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from loreguard.schemas.base import (
    FrozenModel,
    Identifier,
    JsonScalar,
    ShortText,
    SignedUnit,
    StateKey,
    UnitInterval,
)

#: The scope that holds world-wide facts and state. NPC ids cannot start with `@`.
WORLD_SCOPE = "@world"

Scope = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^(@world|[A-Za-z0-9_][A-Za-z0-9_.:\-]*)$")]


class Authority(IntEnum):
    """Who is writing. Higher values outrank lower ones."""

    LLM_SUGGESTION = 0
    VALIDATED_OUTPUT = 1
    GAME_SYSTEM = 2
    DESIGNER = 3


class MemoryKind(str, Enum):
    CANONICAL = "canonical"
    WORLD_STATE = "world_state"
    EPISODIC = "episodic"
    BELIEF = "belief"


Phrase = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class Claim(FrozenModel):
    """A structured, machine-checkable statement inside a canonical fact:
    `subject.attribute = value`, e.g. `king.name = Arthur`.

    The validation gate uses claims to catch outputs that assert a *different* value for the
    same attribute ("the king is named Edward"), which substring checks cannot see.
    """

    subject: Phrase
    attribute: Phrase
    value: Phrase
    subject_aliases: tuple[Phrase, ...] = ()
    value_aliases: tuple[Phrase, ...] = ()
    #: Phrases that introduce the attribute's value after the subject ("is named", "is called").
    #: Empty means the defaults for the attribute (see `loreguard.memory.claims`).
    cues: tuple[Phrase, ...] = ()


class CanonicalFact(FrozenModel):
    """A designer-authored truth. Immutable once written; no source may change or delete it."""

    id: Identifier
    text: ShortText
    claims: tuple[Claim, ...] = Field(default=(), max_length=16)
    tags: tuple[Phrase, ...] = ()


class StoredCanonicalFact(FrozenModel):
    fact: CanonicalFact
    seq: int


class WorldStateEntry(FrozenModel):
    key: StateKey
    value: JsonScalar
    seq: int
    source: Authority


class EpisodicEntry(FrozenModel):
    """Something that happened. Its strength decays with interactions, never with wall time."""

    id: Identifier
    seq: int
    text: ShortText
    significance: UnitInterval
    #: The NPC's interaction index when this was written; decay is measured from it.
    at_interaction: int = Field(ge=0)
    tags: tuple[Phrase, ...] = ()
    source: Authority


class Belief(FrozenModel):
    """What the NPC holds to be true. May be wrong; never outranks a canonical fact.

    `contradicted` is set by the store, in the batch that writes the belief or the canonical
    fact it contradicts (see `loreguard.memory.claims`); retrieval then leaves it out.
    """

    id: Identifier
    seq: int
    content: ShortText
    confidence: UnitInterval
    sentiment: SignedUnit = 0.0
    contradicted: bool = False
    source: Authority


# --- write operations -------------------------------------------------------------------


class AddCanonicalFact(FrozenModel):
    op: Literal["add_canonical"] = "add_canonical"
    scope: Scope
    fact: CanonicalFact


class SetWorldState(FrozenModel):
    op: Literal["set_world_state"] = "set_world_state"
    scope: Scope
    key: StateKey
    value: JsonScalar


class AppendEpisodic(FrozenModel):
    op: Literal["append_episodic"] = "append_episodic"
    scope: Scope
    text: ShortText
    significance: UnitInterval
    at_interaction: int = Field(ge=0)
    tags: tuple[Phrase, ...] = ()


class UpsertBelief(FrozenModel):
    op: Literal["upsert_belief"] = "upsert_belief"
    scope: Scope
    belief_id: Identifier
    content: ShortText
    confidence: UnitInterval
    sentiment: SignedUnit = 0.0
    contradicted: bool = False


class RemoveEntry(FrozenModel):
    """Delete one entry. Always refused for canonical facts."""

    op: Literal["remove"] = "remove"
    scope: Scope
    kind: MemoryKind
    entry_id: Annotated[str, StringConstraints(min_length=1, max_length=128)]


class ReplaceCanonicalFact(FrozenModel):
    """Exists so that an attempt to rewrite a canonical fact is a typed, counted refusal."""

    op: Literal["replace_canonical"] = "replace_canonical"
    scope: Scope
    fact: CanonicalFact


WriteOp = Annotated[
    AddCanonicalFact | SetWorldState | AppendEpisodic | UpsertBelief | RemoveEntry | ReplaceCanonicalFact,
    Field(discriminator="op"),
]


class MemoryWrite(FrozenModel):
    """One write, with the authority of whoever asks for it."""

    source: Authority
    op: WriteOp


class RefusalCode(str, Enum):
    AUTHORITY = "authority"
    CANONICAL_IMMUTABLE = "canonical_immutable"
    DUPLICATE_ID = "duplicate_id"
    NOT_FOUND = "not_found"
    UNKNOWN_SCOPE = "unknown_scope"


class WriteRefusal(FrozenModel):
    index: int
    op: str
    scope: str
    code: RefusalCode
    reason: str


class ContradictedBelief(FrozenModel):
    """A belief the batch marked `contradicted`, and the canonical fact whose claim it contradicts."""

    scope: Scope
    belief_id: str
    fact_id: str


class BatchResult(FrozenModel):
    """The outcome of one batch. A batch is all or nothing: with any refusal, nothing applies."""

    committed: bool
    applied: int
    refusals: tuple[WriteRefusal, ...] = ()
    #: Sequence numbers assigned to this batch's entries (first, last); None when none were.
    seq_range: tuple[int, int] | None = None
    #: The audit log position of the record written with this batch, when one was.
    audit_seq: int | None = None
    #: Beliefs this batch marked contradicted (by scope, then belief id); marking assigns no
    #: sequence number and is not counted in `applied`.
    contradicted: tuple[ContradictedBelief, ...] = ()


# --- views --------------------------------------------------------------------------------


class ScopeMemory(FrozenModel):
    """Everything one scope holds, each list in its documented strict order:
    canonical by id, world state by key, episodic by seq, beliefs by id."""

    scope: Scope
    canonical: tuple[StoredCanonicalFact, ...] = ()
    world_state: tuple[WorldStateEntry, ...] = ()
    episodic: tuple[EpisodicEntry, ...] = ()
    beliefs: tuple[Belief, ...] = ()

    def canonical_ids(self) -> frozenset[str]:
        return frozenset(item.fact.id for item in self.canonical)

    def state_value(self, key: str) -> JsonScalar | None:
        for entry in self.world_state:
            if entry.key == key:
                return entry.value
        return None
