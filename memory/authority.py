"""Who may write what. Every write to memory passes `check_write`.

| kind        | create / change                      | delete                    |
|-------------|--------------------------------------|---------------------------|
| canonical   | create: Designer only; change: none  | none                      |
| world state | Designer, GameSystem                 | Designer, GameSystem      |
| episodic    | ValidatedOutput and above            | ValidatedOutput and above |
| belief      | ValidatedOutput and above            | ValidatedOutput and above |

An LlmSuggestion (a model's raw proposal) may write nothing: proposals become
ValidatedOutput only after the validation gate approves them.
"""

from __future__ import annotations

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
