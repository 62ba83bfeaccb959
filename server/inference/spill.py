"""The spill tier: KV states of sequences the engine had to drop, kept in host memory.

When the batched engine evicts a resident sequence (sequence ids or KV cells ran short), it
saves the sequence's state here first. A later prompt that shares a longer prefix with a spilled
state than with anything still resident gets it copied back into the cache, which on a CPU
costs milliseconds where evaluating the same 1,500 tokens again costs seconds.

One entry per owner (an NPC's latest evicted turn replaces its older one), least recently used
out first under a byte budget.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from loreguard.server.inference.sequences import common_prefix


@dataclass(frozen=True)
class SpilledSequence:
    owner: str
    tokens: array
    state: bytes = field(repr=False)


@dataclass
class SpillStats:
    spilled: int = 0
    restored: int = 0
    dropped: int = 0
    bytes: int = 0


class SpillCache:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, SpilledSequence] = OrderedDict()
        self.stats = SpillStats()

    def put(self, entry: SpilledSequence) -> None:
        self._drop(entry.owner)
        if len(entry.state) > self.budget_bytes:
            return
        while self._entries and self.stats.bytes + len(entry.state) > self.budget_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.dropped += 1
        self._entries[entry.owner] = entry
        self.stats.bytes += len(entry.state)
        self.stats.spilled += 1

    def best_match(self, tokens: array, *, limit: int) -> tuple[SpilledSequence | None, int]:
        """The spilled state sharing the longest prefix with `tokens` (at most `limit`); ties go
        to the owner that sorts first."""
        best: tuple[SpilledSequence | None, int] = (None, 0)
        for owner in sorted(self._entries):
            entry = self._entries[owner]
            n = min(common_prefix(entry.tokens, tokens), limit)
            if n > best[1]:
                best = (entry, n)
        return best

    def take(self, owner: str) -> SpilledSequence:
        """Remove and return an owner's entry (it goes back into the KV cache)."""
        entry = self._entries.pop(owner)
        self.stats.bytes -= len(entry.state)
        self.stats.restored += 1
        return entry

    def forget(self, owner: str) -> bool:
        return self._drop(owner)

    def owners(self) -> list[str]:
        """Owners with a spilled state, least recently spilled first."""
        return list(self._entries)

    def _drop(self, owner: str) -> bool:
        entry = self._entries.pop(owner, None)
        if entry is None:
            return False
        self.stats.bytes -= len(entry.state)
        return True
