"""An NPC's long-term episodic memory as an inverted index, and BM25 relevance over it.

Retrieval has to find the one entry about the player's sister among a thousand about the weather,
every interaction, in time that does not grow with the store. The index maps each keyword (the
one text normaliser, `text.keywords`) to the entries holding it, so a query touches only
the entries that share a word with it. It is a persistent value: `changed` returns a new index
and leaves the old one as it was, so an interaction that took a view of memory keeps reading the
index of that view while a commit builds the next one.

Relevance is BM25 (Okapi, k1 = 1.2, b = 0.75) with each keyword counted once per entry (memories
are a sentence or two; a word said twice in one is not twice as relevant), scaled by the query's
best possible score so it lies in [0, 1] like the other parts of the retrieval score. BM25's
inverse document frequency is what lets "Kalix" (one entry) outweigh "compass" (forty). The
arithmetic is floats in a fixed order, rounded where it is compared; nothing here depends on dict
or set order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.memory import EpisodicEntry
from loreguard.text.words import keywords

K1 = 1.2
B = 0.75


@dataclass(frozen=True)
class RecallIndex:
    """Keyword -> the sequence numbers of the entries holding it (ascending), and each entry's
    keywords. Build one with `RecallIndex.of`; derive the next with `changed`."""

    postings: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    words: Mapping[int, frozenset[str]] = field(default_factory=dict)
    total_words: int = 0

    @classmethod
    def of(cls, entries: Iterable[EpisodicEntry]) -> RecallIndex:
        return cls().changed(added=entries)

    def changed(self, *, added: Iterable[EpisodicEntry] = (), removed: Iterable[int] = ()) -> RecallIndex:
        """The index once `removed` (sequence numbers) are gone and `added` are in; self stays."""
        postings = dict(self.postings)
        words = dict(self.words)
        total = self.total_words
        rebuilt: dict[str, set[int]] = {}  # words that lost an entry: their postings, rebuilt once
        for seq in removed:
            gone = words.pop(seq, None)
            if gone is None:
                continue
            total -= len(gone)
            for word in gone:
                rebuilt.setdefault(word, set(postings.get(word, ()))).discard(seq)
        for word in sorted(rebuilt):
            seqs = rebuilt[word]
            if seqs:
                postings[word] = tuple(sorted(seqs))
            else:
                del postings[word]
        appended: dict[str, list[int]] = {}
        for entry in added:
            if entry.seq in words:
                continue
            mine = keywords(entry.text)
            words[entry.seq] = mine
            total += len(mine)
            for word in mine:
                appended.setdefault(word, []).append(entry.seq)
        for word, new in appended.items():
            held = postings.get(word, ())
            # New entries take the highest sequence numbers: usually an append.
            if new == sorted(new) and (not held or held[-1] < new[0]):
                postings[word] = held + tuple(new)
            else:
                postings[word] = tuple(sorted((*held, *new)))
        return RecallIndex(MappingProxyType(postings), MappingProxyType(words), total)

    def idf(self, word: str) -> float:
        """BM25's inverse document frequency: always positive, highest for the rarest words."""
        df = len(self.postings.get(word, ()))
        n = len(self.words)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def relevance(self, query_words: frozenset[str]) -> Mapping[int, float]:
        """`relevance_of`, remembered for this index and this very set of words: the contract and
        retrieval both ask it of one interaction's line (`keywords` hands them the same set)."""
        return _RELEVANCE.get((self, query_words), lambda: MappingProxyType(self.relevance_of(query_words)))

    def relevance_of(self, query_words: Iterable[str]) -> dict[int, float]:
        """seq -> BM25 of the entries sharing a keyword with the query, divided by the best score
        the query could reach: 1.0 is an entry of average length holding every query word the
        index knows. Every word counts: one the NPC's memories mostly share (the castle it
        guards) weighs little beside a rare one, but when it is all the player asked about it
        still finds the memories that hold it."""
        n = len(self.words)
        if not n:
            return {}
        average = self.total_words / n if self.total_words else 1.0
        scores: dict[int, float] = {}
        best = 0.0
        for word in sorted(set(query_words)):
            seqs = self.postings.get(word)
            if not seqs:
                continue
            idf = self.idf(word)
            best += idf
            for seq in seqs:
                length = len(self.words[seq])
                gain = idf * (K1 + 1.0) / (1.0 + K1 * (1.0 - B + B * length / average))
                scores[seq] = scores.get(seq, 0.0) + gain
        if best <= 0.0:
            return {}
        return {seq: min(1.0, score / best) for seq, score in scores.items()}


_RELEVANCE: IdentityMemo[Mapping[int, float]] = IdentityMemo(maxsize=256)
