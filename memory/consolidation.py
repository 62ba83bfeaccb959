"""What an NPC's long-term memory keeps when it passes its bound.

When an NPC holds more than `MemoryPolicy.episodic_limit` episodic entries, its oldest
`consolidate_oldest` entries are consolidated: the `consolidate_keep` most significant stay, word
for word, and the rest go. This is the deterministic consolidation, the one the store applies by
itself in the batch that crossed the bound, so memory stays bounded whether or not a model has
time to summarise.

"Most significant" is the entry's significance times what it says that the rest of the NPC's
memory does not: the summed rarity (BM25's inverse document frequency, over the NPC's whole
episodic memory) of its words. The player's one line about a sister who hid a compass outweighs
forty about the weather, though both were written with the same significance. Ties go to the
newer entry, then to the sequence number, so the choice is a strict total order of content.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter

from loreguard.memory.recall import RecallIndex
from loreguard.schemas.memory import EpisodicEntry


def oldest_block(entries: Iterable[EpisodicEntry], size: int) -> list[EpisodicEntry]:
    """The `size` entries with the lowest sequence numbers, oldest first."""
    return sorted(entries, key=attrgetter("seq"))[:size]


def information(entry: EpisodicEntry, index: RecallIndex, idf: dict[str, float] | None = None) -> float:
    """The summed rarity of the entry's words in the NPC's memory (`index`); `idf` caches each
    word's rarity across the calls of one consolidation."""
    known = {} if idf is None else idf
    total = 0.0
    for word in sorted(index.words.get(entry.seq, ())):
        rarity = known.get(word)
        if rarity is None:
            rarity = known[word] = index.idf(word)
        total += rarity
    return total


def keep_most_significant(
    block: Sequence[EpisodicEntry], keep: int, index: RecallIndex
) -> tuple[list[EpisodicEntry], list[EpisodicEntry]]:
    """(kept, dropped) of `block`: the `keep` entries with the highest significance × information,
    each list oldest first."""
    idf: dict[str, float] = {}
    ranked = sorted(block, key=lambda e: (-round(e.significance * information(e, index, idf), 9), -e.seq))
    kept = sorted(ranked[:keep], key=lambda e: e.seq)
    dropped = sorted(ranked[keep:], key=lambda e: e.seq)
    return kept, dropped
