"""Authoritative memory: entries, authorities, write operations and their typed results.

Authority decides who may write what (see `loreguard.memory.authority`):
canonical facts (Designer, immutable) > world state (Designer, GameSystem) >
episodic memory and beliefs (ValidatedOutput and above). A model's raw suggestion
(LlmSuggestion) may write nothing.
"""

from __future__ import annotations

import json
from enum import Enum, IntEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer, model_validator

from loreguard.schemas.base import (
    FrozenModel,
    Identifier,
    JsonScalar,
    LongText,
    ShortText,
    SignedUnit,
    StateKey,
    UnitInterval,
)
from loreguard.schemas.text import matchable, words

#: The scope that holds world-wide facts and state. NPC ids cannot start with `@`.
WORLD_SCOPE = "@world"

Scope = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^(@world|[A-Za-z0-9_][A-Za-z0-9_.:\-]*)$")]


#: World-state keys under this prefix are the sidecar's own: never shown to the model or to
#: rules, and refused by `world.set_state` unless named here.
RESERVED_STATE_PREFIX = "loreguard."
#: The playthrough's seed (`world.set_state`, `Client.new_game`): with it, every line's seed is
#: drawn from it and the NPC's interaction count, so a new game sounds new while a save replays
#: the same lines. Without it, the interaction count alone seeds the model.
GAME_SEED_KEY = "loreguard.seed"


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


_PHRASE_MAX = 200
Phrase = Annotated[str, StringConstraints(min_length=1, max_length=_PHRASE_MAX)]


#: A claim's phrase: the claim checker matches it, so one that normalises to no word is refused
#: (with the path of the field that holds it).
ClaimPhrase = Annotated[str, StringConstraints(min_length=1, max_length=_PHRASE_MAX), AfterValidator(matchable)]


class Claim(FrozenModel):
    """A structured, machine-checkable statement inside a canonical fact:
    `subject.attribute = value`, e.g. `king.name = Arthur`.

    The validation gate uses claims to catch outputs that assert a *different* value for the
    same attribute ("the king is named Edward"), which substring checks cannot see.
    """

    subject: ClaimPhrase
    attribute: ClaimPhrase
    value: ClaimPhrase
    subject_aliases: tuple[ClaimPhrase, ...] = ()
    value_aliases: tuple[ClaimPhrase, ...] = ()
    #: Phrases that introduce the attribute's value after the subject ("is named", "is called").
    #: Empty means the defaults for the attribute (see `loreguard.memory.claims`).
    cues: tuple[ClaimPhrase, ...] = ()
    #: Other values the attribute could take ("dawn", "midnight", "all night" for a closing
    #: time): a clause naming the subject and one of these contradicts the fact even without a
    #: cue ("the gate stays open all night").
    other_values: tuple[ClaimPhrase, ...] = ()
    #: For a name: phrases that, after another name, say it holds the subject's place ("rules",
    #: "sits on the throne"): with these, "Edward rules" contradicts king.name = Arthur.
    role_cues: tuple[ClaimPhrase, ...] = ()


def value_text(value: JsonScalar) -> str:
    """A world-state value as a claim names it: a string as it is, any other value as JSON writes
    it (`true`, `false`, `3`, `1.5`)."""
    return value if isinstance(value, str) else json.dumps(value)


class StateClaim(FrozenModel):
    """A world-state key described like a canonical fact's claim, without the value: the value
    is the key's at interaction time. `gate.north` as subject "north gate", attribute "state",
    cues "is", "stands": with `gate.north = "closed"` the gate catches "the north gate is open"
    exactly as it catches a contradicted canonical claim (see `loreguard.memory.claims`), and
    only when the prompt carried the key.
    """

    subject: Phrase
    attribute: Phrase
    subject_aliases: tuple[Phrase, ...] = ()
    #: Phrases that introduce the value after the subject. Empty: the attribute's defaults.
    cues: tuple[Phrase, ...] = ()
    #: The values the key takes (as `value_text` writes them), each with other words that say
    #: it: `{"closed": ["shut", "barred"], "open": ["opened"]}`. When given, only these words (and
    #: the key's current value) are read as a value after a cue, so "the gate is that way"
    #: asserts nothing and "the gate is now open" asserts "open". Empty: any words after a cue
    #: are the asserted value, as for a canonical claim.
    values: dict[Phrase, tuple[Phrase, ...]] = Field(default_factory=dict, max_length=64)

    @model_validator(mode="after")
    def _every_phrase_matchable(self) -> StateClaim:
        for phrase in (self.subject, self.attribute, *self.subject_aliases, *self.cues, *self.values):
            matchable(phrase)
        for aliases in self.values.values():
            for phrase in aliases:
                matchable(phrase)
        return self

    def claim(self, value: JsonScalar) -> Claim | None:
        """The claim this key makes while it holds `value`; None for a value no reply can state
        (one that folds to no word, or longer than a phrase)."""
        text = value_text(value)
        if not words(text) or len(text) > _PHRASE_MAX:
            return None
        return Claim(
            subject=self.subject,
            attribute=self.attribute,
            value=text,
            subject_aliases=self.subject_aliases,
            value_aliases=self.values.get(text, ()),
            cues=self.cues,
        )

    def known_values(self, value: JsonScalar) -> tuple[str, ...]:
        """Every phrase that names a value of this key, the current one included; empty when
        the claim lists no values (then any words after a cue are a value)."""
        if not self.values:
            return ()
        phrases = {value_text(value), *self.values}
        for aliases in self.values.values():
            phrases.update(aliases)
        return tuple(sorted(phrases))


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


class ExchangeTurn(FrozenModel):
    """One turn of a conversation as the prompt replays it: the player's message and the NPC's
    reply as the model wrote it (what was spoken, and only the approved changes). Replaying the
    reply byte for byte lets the next turn reuse the model's own cached tokens."""

    #: The player's message with the context the prompt gave it (world state, memories, the
    #: situation), as sent.
    player: LongText
    reply: ShortText


def _omit_absent_turn(model: Any, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
    # An entry without a turn serializes as it did before turns existed, so memory hashes of
    # stores written then do not change.
    data: dict[str, Any] = handler(model)
    if data.get("turn", 0) is None:
        del data["turn"]
    return data


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
    #: For a conversation exchange: the turn as the prompt shows it. None for other memories.
    turn: ExchangeTurn | None = None

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _omit_absent_turn(self, handler)


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
    turn: ExchangeTurn | None = None

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _omit_absent_turn(self, handler)


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
