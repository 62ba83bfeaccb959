"""Which KV-cache sequence holds which tokens: the bookkeeping behind prefix reuse.

The batched engine keeps one llama.cpp context with a fixed number of sequence ids. Each id is
free, *active* (a generation is filling it) or *resident* (a finished generation's tokens, kept
so a later prompt that starts the same way skips evaluating them). A new prompt takes the
sequence, active or resident, that shares the longest token prefix with it, and copies that
prefix into its own sequence: in a unified cache the copy shares cells, it does not duplicate
them. Resident sequences are dropped least recently used first when ids or cells run short.

A linear scan finds the longest match: with at most a few hundred sequences of a few thousand
tokens it costs well under a millisecond in numpy, and it answers exactly what a radix tree over
the same sequences would. Everything here is plain Python and runs without a model.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Sequence:
    seq_id: int
    #: Whose turn filled it (an NPC id); statistics only, matching looks at tokens alone.
    owner: str
    #: Tokens whose keys and values are in the cache for this sequence, in position order.
    tokens: array = field(default_factory=lambda: array("i"))
    active: bool = True
    #: The pool's clock when the sequence was last used; orders eviction.
    last_used: int = 0


@dataclass(frozen=True)
class Match:
    #: The sequence to copy from, or None when nothing shares a prefix.
    seq_id: int | None
    n_tokens: int


def common_prefix(a: array, b: array) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    left = np.frombuffer(a, dtype=np.int32, count=n)
    right = np.frombuffer(b, dtype=np.int32, count=n)
    diff = np.flatnonzero(left != right)
    return int(diff[0]) if diff.size else n


class SequencePool:
    """Sequence ids `0 .. n_sequences-1`; at most `max_active` generations at once."""

    def __init__(self, n_sequences: int, max_active: int) -> None:
        if not 1 <= max_active <= n_sequences:
            raise ValueError(f"max_active={max_active} must be between 1 and n_sequences={n_sequences}")
        self.n_sequences = n_sequences
        self.max_active = max_active
        self._free = list(range(n_sequences - 1, -1, -1))  # pop() hands out the lowest id first
        self._sequences: dict[int, Sequence] = {}
        self._clock = 0
        self.evictions = 0

    @property
    def n_active(self) -> int:
        return sum(1 for s in self._sequences.values() if s.active)

    def resident(self) -> list[Sequence]:
        """Finished sequences kept for reuse, least recently used first."""
        return sorted((s for s in self._sequences.values() if not s.active), key=lambda s: (s.last_used, s.seq_id))

    def get(self, seq_id: int) -> Sequence:
        return self._sequences[seq_id]

    def longest_match(self, tokens: array, *, limit: int) -> Match:
        """The sequence sharing the longest prefix with `tokens`, capped at `limit` tokens.

        Ties go to the lowest sequence id, so the choice never depends on dict order.
        """
        best = Match(None, 0)
        for seq_id in sorted(self._sequences):
            n = min(common_prefix(self._sequences[seq_id].tokens, tokens), limit)
            if n > best.n_tokens:
                best = Match(seq_id, n)
        return best

    def acquire(self, owner: str, *, keep: int | None = None) -> tuple[Sequence, Sequence | None]:
        """A sequence for a new generation, and the resident sequence evicted to make room
        (the caller frees its cells), if any; `keep` is never evicted (the match about to be
        copied). Raises `RuntimeError` when `max_active` are busy."""
        if self.n_active >= self.max_active:
            raise RuntimeError("every generation slot is busy")
        evicted = None
        if not self._free:
            evicted = self.evict_one(keep=keep)
            if evicted is None:  # only possible if n_sequences == max_active and all are active
                raise RuntimeError("no sequence id is free")
        seq = Sequence(seq_id=self._free.pop(), owner=owner, last_used=self._tick())
        self._sequences[seq.seq_id] = seq
        return seq, evicted

    def has_resident_room(self) -> bool:
        """Another sequence can be kept resident without evicting one or taking an id the
        generation slots need (what a warm-up may use)."""
        return len(self._free) > self.max_active - self.n_active

    def touch(self, seq_id: int) -> None:
        self._sequences[seq_id].last_used = self._tick()

    def finish(self, seq_id: int) -> None:
        """The generation ended: its tokens stay resident for later prompts."""
        seq = self._sequences[seq_id]
        seq.active = False
        seq.last_used = self._tick()

    def release(self, seq_id: int) -> None:
        """Forget a sequence entirely (its cells must be freed by the caller)."""
        del self._sequences[seq_id]
        self._free.append(seq_id)
        self._free.sort(reverse=True)

    def evict_one(self, *, keep: int | None = None) -> Sequence | None:
        """Drop the least recently used resident sequence (never `keep`) and return it (its id
        is free again; its cells are the caller's to save or free), or None."""
        resident = [s for s in self.resident() if s.seq_id != keep]
        if not resident:
            return None
        victim = resident[0]
        self.release(victim.seq_id)
        self.evictions += 1
        return victim

    def owned_by(self, owner: str) -> list[int]:
        return sorted(s.seq_id for s in self._sequences.values() if s.owner == owner and not s.active)

    def clear(self) -> list[int]:
        """Forget every sequence; the ids that were in use."""
        used = sorted(self._sequences)
        for seq_id in used:
            self.release(seq_id)
        return used

    def _tick(self) -> int:
        self._clock += 1
        return self._clock
