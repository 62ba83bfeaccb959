"""Saved KV state of each NPC's static prefix, least recently used first out, under a byte budget.

One entry per NPC: when an NPC's prefix changes (a profile edit, a new canonical fact) its old
entry is dropped on the next lookup, and no other NPC's entry is touched.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PrefixState:
    #: sha256 of the prefix token ids.
    key: str
    n_tokens: int
    state: bytes = field(repr=False)


@dataclass
class PrefixCacheStats:
    hits: int = 0
    misses: int = 0
    invalidations: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0


class PrefixCache:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, PrefixState] = OrderedDict()
        self.stats = PrefixCacheStats()

    def get(self, npc_id: str, key: str) -> PrefixState | None:
        entry = self._entries.get(npc_id)
        if entry is not None and entry.key != key:
            self._drop(npc_id)
            self.stats.invalidations += 1
            entry = None
        if entry is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(npc_id)
        self.stats.hits += 1
        return entry

    def peek(self, npc_id: str, key: str) -> bool:
        """The NPC's prefix `key` is cached (no statistics, no recency change)."""
        entry = self._entries.get(npc_id)
        return entry is not None and entry.key == key

    def has_room(self, npc_id: str, n_bytes: int) -> bool:
        """The NPC's state of `n_bytes` fits without dropping another NPC's (a warm-up's test)."""
        entry = self._entries.get(npc_id)
        held = len(entry.state) if entry is not None else 0
        return self.stats.bytes - held + n_bytes <= self.budget_bytes

    def put(self, npc_id: str, entry: PrefixState) -> None:
        if npc_id in self._entries:
            self._drop(npc_id)
        if len(entry.state) > self.budget_bytes:
            return
        while self._entries and self.stats.bytes + len(entry.state) > self.budget_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.evictions += 1
        self._entries[npc_id] = entry
        self.stats.bytes += len(entry.state)
        self.stats.entries = len(self._entries)

    def invalidate(self, npc_id: str) -> bool:
        if npc_id not in self._entries:
            return False
        self._drop(npc_id)
        self.stats.invalidations += 1
        return True

    def cached_npcs(self) -> list[str]:
        """NPC ids with a cached prefix, least recently used first."""
        return list(self._entries)

    def _drop(self, npc_id: str) -> None:
        entry = self._entries.pop(npc_id)
        self.stats.bytes -= len(entry.state)
        self.stats.entries = len(self._entries)
