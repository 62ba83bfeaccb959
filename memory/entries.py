"""A scope's entries as (kind, id, entry) rows, and scopes rebuilt from rows in their documented order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Union

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import Belief, EpisodicEntry, MemoryKind, ScopeMemory, StoredCanonicalFact, WorldStateEntry

#: Any one memory entry, whatever its kind.
Entry = Union[StoredCanonicalFact, WorldStateEntry, EpisodicEntry, Belief]

ENTRY_MODELS: dict[MemoryKind, type[FrozenModel]] = {
    MemoryKind.CANONICAL: StoredCanonicalFact,
    MemoryKind.WORLD_STATE: WorldStateEntry,
    MemoryKind.EPISODIC: EpisodicEntry,
    MemoryKind.BELIEF: Belief,
}


def entry_key(entry: Entry) -> str:
    """The id an entry is stored under: fact id, world-state key, or the entry's own id."""
    if isinstance(entry, StoredCanonicalFact):
        return entry.fact.id
    if isinstance(entry, WorldStateEntry):
        return entry.key
    return entry.id


def kind_entries(scope: ScopeMemory) -> Iterable[tuple[MemoryKind, Entry]]:
    """(kind, entry) for every entry of a scope, kind by kind."""
    groups: tuple[tuple[MemoryKind, tuple[Entry, ...]], ...] = (
        (MemoryKind.CANONICAL, scope.canonical),
        (MemoryKind.WORLD_STATE, scope.world_state),
        (MemoryKind.EPISODIC, scope.episodic),
        (MemoryKind.BELIEF, scope.beliefs),
    )
    for kind, entries in groups:
        for entry in entries:
            yield kind, entry


def scope_entries(scope: ScopeMemory) -> Iterable[tuple[MemoryKind, str, Entry]]:
    """(kind, entry id, entry) for every entry of a scope."""
    for kind, entry in kind_entries(scope):
        yield kind, entry_key(entry), entry


def build_scope(name: str, entries: Iterable[tuple[MemoryKind, object]]) -> ScopeMemory:
    """A scope from (kind, entry as JSON value) pairs, each list in its documented order."""
    parts: dict[MemoryKind, list[Any]] = {kind: [] for kind in MemoryKind}
    for kind, value in entries:
        parts[kind].append(ENTRY_MODELS[kind].model_validate(value))
    return sorted_scope(name, parts)


def sorted_scope(name: str, parts: dict[MemoryKind, list[Any]]) -> ScopeMemory:
    """A scope from already-parsed entries per kind, each list in its documented order."""
    return ScopeMemory(
        scope=name,
        canonical=tuple(sorted(parts[MemoryKind.CANONICAL], key=lambda c: c.fact.id)),
        world_state=tuple(sorted(parts[MemoryKind.WORLD_STATE], key=lambda w: w.key)),
        episodic=tuple(sorted(parts[MemoryKind.EPISODIC], key=lambda e: e.seq)),
        beliefs=tuple(sorted(parts[MemoryKind.BELIEF], key=lambda b: b.id)),
    )
