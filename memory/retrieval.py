"""Scored retrieval of episodic memories and beliefs for one prompt.

Every list comes out in a strict total order, so the same memory and the same player input give
the same prompt whatever order the entries were written in:

* episodic: up to half the places go to the memories the player's line calls for (relevance
  descending); the rest by score descending; each list then by interaction index descending
  (newer first), then text, then sequence number. Relevance is BM25 over the NPC's whole
  long-term memory (`recall`), so an old memory comes back when it is asked about;
* beliefs: score descending, then belief id (unique in a scope).

Only content decides the order, never the order entries were written in: the sequence number
is the last resort, between entries whose content is identical (so their order cannot show in
the prompt). Scores are rounded to 1e-9 before comparing so that the order never hangs on the
last bit of a float.

`keywords` (the one normaliser for matching words) lives in `text` and is re-exported here.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from pydantic import Field

from loreguard.memory.policy import episodic_strengths
from loreguard.memory.recall import RecallIndex
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import Belief, EpisodicEntry
from loreguard.text.words import STOPWORDS, keywords


class RetrievalWeights(FrozenModel):
    recency: float = Field(default=0.3, ge=0.0)
    relevance: float = Field(default=0.45, ge=0.0)
    significance: float = Field(default=0.25, ge=0.0)
    confidence: float = Field(default=0.25, ge=0.0)


class RetrievalQuery(FrozenModel):
    player_input: str = ""
    now_interaction: int = Field(default=0, ge=0)
    max_episodic: int = Field(default=6, ge=0)
    max_beliefs: int = Field(default=6, ge=0)
    belief_threshold: float = Field(default=0.2, ge=0.0, le=1.0)
    decay: float = Field(default=0.97, gt=0.0, le=1.0)
    #: Episodic entries carrying any of these tags are left out (e.g. raw exchanges, which the
    #: prompt shows in their own section).
    exclude_tags: tuple[str, ...] = ()
    weights: RetrievalWeights = RetrievalWeights()


class Scored(FrozenModel):
    score: float
    seq: int
    id: str


def relevance(entry_words: frozenset[str], query_words: frozenset[str]) -> float:
    if not query_words:
        return 0.0
    return len(entry_words & query_words) / len(query_words)


def _score_episodes(entries: Sequence[EpisodicEntry], query: RetrievalQuery, relevance: Sequence[float]) -> list[float]:
    """Each entry's score from its relevance (`RecallIndex.relevance`, 0 to 1). The one formula:
    recency (strength over significance, at most 1: the forgetting curve), relevance and
    significance, weighted, rounded to 1e-9."""
    w = query.weights
    w_recency, w_relevance, w_significance = w.recency, w.relevance, w.significance
    strengths = episodic_strengths(entries, query.now_interaction, query.decay)
    return [
        round(
            w_recency * min(strength / max(entry.significance, 1e-9), 1.0)
            + w_relevance * rel
            + w_significance * entry.significance,
            9,
        )
        for entry, strength, rel in zip(entries, strengths, relevance, strict=True)
    ]


def score_belief(belief: Belief, query: RetrievalQuery, query_words: frozenset[str]) -> float:
    w = query.weights
    return round(w.relevance * relevance(keywords(belief.content), query_words) + w.confidence * belief.confidence, 9)


#: The newest memories scored whatever the player said: an older memory comes back only when the
#: player's line shares a word with it (so retrieval costs the same in a store of thousands).
RECENT_CANDIDATES = 64
#: At most this many more candidates join them, the most relevant first: a word in most of an
#: NPC's memories (its own town) must not make every query score the whole store.
RELEVANT_CANDIDATES = 64
#: Relevance (0 to 1) at which a memory counts as called for by the player's line.
RELEVANCE_FLOOR = 0.3


def retrieve_episodic(
    entries: Iterable[EpisodicEntry],
    query: RetrievalQuery,
    index: RecallIndex | None = None,
    said: Callable[[EpisodicEntry], str] = attrgetter("text"),
) -> tuple[tuple[EpisodicEntry, float], ...]:
    """The best `max_episodic` entries with their scores, in the documented order: first up to
    half of them (rounded up) that the player's line calls for (relevance at least
    `RELEVANCE_FLOOR`, most relevant first, then by score), then the best of the rest by score; of memories
    that `said` the same thing (by default: the same text), only the first so chosen.

    The candidates are the newest `RECENT_CANDIDATES` entries and the `RELEVANT_CANDIDATES`
    entries most relevant to the player's line (ties: the newest). `index` is the NPC's whole long-term memory (`RecallIndex`), from
    which relevance takes its word rarities; without it, one is built from `entries`."""
    if not query.max_episodic:
        return ()  # a prompt without memories (the task does not need them)
    words = keywords(query.player_input)
    excluded = set(query.exclude_tags)
    kept = sorted((e for e in entries if excluded.isdisjoint(e.tags)) if excluded else entries, key=_BY_SEQ)
    if index is None:
        index = RecallIndex.of(kept)
    relevance = index.relevance(words) if words else {}
    chosen = set(range(max(0, len(kept) - RECENT_CANDIDATES), len(kept)))
    for seq in heapq.nsmallest(RELEVANT_CANDIDATES, relevance, key=lambda seq: (-round(relevance[seq], 9), -seq)):
        at = bisect.bisect_left(kept, seq, key=_BY_SEQ)
        if at < len(kept) and kept[at].seq == seq:
            chosen.add(at)
    candidates = [kept[i] for i in sorted(chosen)]
    scores = _score_episodes(candidates, query, [relevance.get(e.seq, 0.0) for e in candidates])
    # Sorted on tuples built in place of a key function, ending with the position (a stable
    # sort's tie-break, should two entries share a seq), so the entries are never compared.
    # Equally relevant (a word every one of them holds) ranks by score.
    called_for = sorted(
        (-round(relevance[e.seq], 9), -scores[i], -e.at_interaction, e.text, e.seq, i)
        for i, e in enumerate(candidates)
        if relevance.get(e.seq, 0.0) >= RELEVANCE_FLOOR
    )
    ranked = sorted(
        (-score, -e.at_interaction, e.text, e.seq, i) for i, (e, score) in enumerate(zip(candidates, scores, strict=True))
    )
    order: list[int] = []
    seen: set[str] = set()
    for ranking, places in ((called_for, (query.max_episodic + 1) // 2), (ranked, query.max_episodic)):
        for *_, i in ranking:
            if len(order) >= places:
                break
            # One memory per thing said: the tenth "How is the weather?" adds nothing to the first.
            what = said(candidates[i])
            if i not in order and what not in seen:
                order.append(i)
                seen.add(what)
    return tuple((candidates[i], scores[i]) for i in order)


_BY_SEQ = attrgetter("seq")


def retrieve_beliefs(beliefs: Iterable[Belief], query: RetrievalQuery) -> tuple[tuple[Belief, float], ...]:
    """Beliefs at or above the confidence threshold and not contradicted, best first."""
    if not query.max_beliefs:
        return ()
    words = keywords(query.player_input)
    scored = [
        (b, score_belief(b, query, words)) for b in beliefs if b.confidence >= query.belief_threshold and not b.contradicted
    ]
    scored.sort(key=lambda pair: (-pair[1], pair[0].id))
    return tuple(scored[: query.max_beliefs])


__all__ = ["STOPWORDS", "RetrievalQuery", "RetrievalWeights", "keywords", "relevance", "retrieve_beliefs", "retrieve_episodic"]
