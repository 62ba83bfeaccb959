"""Who may write what. Every write to memory passes `check_write`.

| kind        | create / change                      | delete                    |
|-------------|--------------------------------------|---------------------------|
| canonical   | create: Designer only; change: none  | none                      |
| world state | Designer, GameSystem                 | Designer, GameSystem      |
| episodic    | ValidatedOutput and above            | ValidatedOutput and above |
| belief      | ValidatedOutput and above            | ValidatedOutput and above |

An LlmSuggestion (a model's raw proposal) may write nothing: proposals become
ValidatedOutput only after the validation gate approves them.

Beliefs and canonical facts share one id space: a belief may not take the id of a fact it can
see (its own scope's or the world's), or it would shadow the fact under the same name, and a new
fact may not take the id of a belief it would reach. `check_identity` is that rule; every write
path (a batch, a registration, a slot load) asks it.
"""

from __future__ import annotations

from collections.abc import Container

from loreguard.schemas.memory import (
    AddCanonicalFact,
    AppendEpisodic,
    Authority,
    MemoryKind,
    RefusalCode,
    RemoveEntry,
    ReplaceCanonicalFact,
    SetWorldState,
    UpsertBelief,
)

#: The least authority that may write each kind of memory.
MINIMUM_AUTHORITY: dict[MemoryKind, Authority] = {
    MemoryKind.CANONICAL: Authority.DESIGNER,
    MemoryKind.WORLD_STATE: Authority.GAME_SYSTEM,
    MemoryKind.EPISODIC: Authority.VALIDATED_OUTPUT,
    MemoryKind.BELIEF: Authority.VALIDATED_OUTPUT,
}


def target_kind(op: object) -> MemoryKind:
    """The kind of memory a write operation touches."""
    if isinstance(op, (AddCanonicalFact, ReplaceCanonicalFact)):
        return MemoryKind.CANONICAL
    if isinstance(op, SetWorldState):
        return MemoryKind.WORLD_STATE
    if isinstance(op, AppendEpisodic):
        return MemoryKind.EPISODIC
    if isinstance(op, UpsertBelief):
        return MemoryKind.BELIEF
    if isinstance(op, RemoveEntry):
        return op.kind
    raise TypeError(f"not a memory write operation: {type(op).__name__}")


def check_write(source: Authority, op: object) -> tuple[RefusalCode, str] | None:
    """None when `source` may perform `op`; otherwise the refusal code and a reason.

    Immutability is checked before rank: not even a Designer may change a canonical fact.
    """
    kind = target_kind(op)
    if kind is MemoryKind.CANONICAL and not isinstance(op, AddCanonicalFact):
        return RefusalCode.CANONICAL_IMMUTABLE, "canonical facts can never be changed or deleted"
    needed = MINIMUM_AUTHORITY[kind]
    if source < needed:
        return (
            RefusalCode.AUTHORITY,
            f"{source.name} may not write {kind.value} memory (needs {needed.name} or above)",
        )
    return None


def check_identity(
    kind: MemoryKind, entry_id: str, *, canonical_ids: Container[str], belief_ids: Container[str]
) -> tuple[RefusalCode, str] | None:
    """None when an entry of `kind` may take `entry_id`; otherwise the refusal code and a reason.

    `canonical_ids` are the facts a belief in the target scope can see (the scope's and the
    world's); `belief_ids` are the beliefs a new fact would reach (the scope's, or every scope's
    for a world fact). Only beliefs and canonical facts are checked: other kinds have ids of
    their own making.
    """
    if kind is MemoryKind.BELIEF and entry_id in canonical_ids:
        return RefusalCode.CANONICAL_IMMUTABLE, f"{entry_id!r} is a canonical fact; a belief may not take its id"
    if kind is MemoryKind.CANONICAL and entry_id in belief_ids:
        return RefusalCode.DUPLICATE_ID, f"{entry_id!r} is already a belief's id; a canonical fact may not take it"
    return None
