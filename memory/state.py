"""The database rows read back as the store's in-RAM state, and all rows swapped at once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loreguard.memory.entries import ENTRY_MODELS, sorted_scope
from loreguard.memory.hashing import memory_hash_of, sha256_hex
from loreguard.schemas.memory import WORLD_SCOPE, MemoryKind, ScopeMemory
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.rules import BehaviourStats


@dataclass
class StoredState:
    """Everything the store caches, as read from the database in one pass."""

    scopes: dict[str, ScopeMemory]
    #: Per-entry digests of the stored canonical JSON, so a scope's hash after a batch costs
    #: only the entries the batch wrote.
    entry_digests: dict[str, dict[tuple[str, str], str]]
    profiles: dict[str, NpcProfile]
    world: WorldDefinition | None
    interactions: dict[str, int]
    behaviour: dict[str, BehaviourStats]
    next_seq: int
    #: Per NPC: the last fallback line it spoke (absent: none yet). Outside the memory hash.
    last_fallback: dict[str, str] = field(default_factory=dict)

    def memory_hash(self) -> str:
        return memory_hash_of({name: self.entry_digests[name] for name in self.scopes}, next_seq=self.next_seq)


def read_state(db: sqlite3.Connection) -> StoredState:
    parts: dict[str, dict[MemoryKind, list[Any]]] = {}
    profiles: dict[str, NpcProfile] = {}
    world: WorldDefinition | None = None
    interactions: dict[str, int] = {}
    last_fallback: dict[str, str] = {}
    for scope, definition, count, line in db.execute("SELECT scope, definition, interactions, last_fallback FROM scopes"):
        parts[scope] = {kind: [] for kind in MemoryKind}
        interactions[scope] = count
        if line is not None:
            last_fallback[scope] = line
        if definition is None:
            continue
        if scope == WORLD_SCOPE:
            world = WorldDefinition.model_validate_json(definition)
        else:
            profiles[scope] = NpcProfile.model_validate_json(definition)
    digests: dict[str, dict[tuple[str, str], str]] = {scope: {} for scope in parts}
    for scope, kind, entry_id, data in db.execute("SELECT scope, kind, id, data FROM entries"):
        memory_kind = MemoryKind(kind)
        parts[scope][memory_kind].append(ENTRY_MODELS[memory_kind].model_validate_json(data))
        digests[scope][(kind, entry_id)] = sha256_hex(data)
    scopes = {scope: sorted_scope(scope, p) for scope, p in parts.items()}
    behaviour = {
        rule_id: BehaviourStats(rule_id=rule_id, positive=pos, negative=neg)
        for rule_id, pos, neg in db.execute("SELECT rule_id, positive, negative FROM behaviour")
    }
    (next_seq,) = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
    return StoredState(scopes, digests, profiles, world, interactions, behaviour, next_seq, last_fallback)


def replace_contents(
    db: sqlite3.Connection,
    scopes: Iterable[Sequence[object]],
    entries: Iterable[Sequence[object]],
    behaviour: Iterable[Sequence[object]],
    next_seq: int,
) -> StoredState:
    """Swap every memory row for the given ones (inside the caller's transaction): how a save
    slot is loaded and how a replay puts the store back where a recording started. A scope row
    is (scope, definition, interactions, last fallback line or None). The next sequence number
    is put back exactly, not only raised: it is part of the memory hash, and equal hashes must
    assign equal ids to the next writes."""
    db.execute("DELETE FROM scopes")
    db.execute("DELETE FROM entries")
    db.execute("DELETE FROM behaviour")
    db.executemany("INSERT INTO scopes(scope, definition, interactions, last_fallback) VALUES (?, ?, ?, ?)", scopes)
    db.executemany("INSERT INTO entries(scope, kind, id, seq, data) VALUES (?, ?, ?, ?, ?)", entries)
    db.executemany("INSERT INTO behaviour(rule_id, positive, negative) VALUES (?, ?, ?)", behaviour)
    db.execute("UPDATE meta SET value = ? WHERE key = 'next_seq'", (next_seq,))
    return read_state(db)
