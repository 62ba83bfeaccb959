"""Scored retrieval of episodic memories and beliefs for one prompt.

Every list comes out in a strict total order, so the same memory and the same player input give
the same prompt whatever order the entries were written in:

* episodic: score descending, then interaction index descending (newer first), then text, then
  sequence number;
* beliefs: score descending, then belief id (unique in a scope).

Only content decides the order, never the order entries were written in: the sequence number
is the last resort, between entries whose content is identical (so their order cannot show in
the prompt). Scores are rounded to 1e-9 before comparing so that the order never hangs on the
last bit of a float.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from pydantic import Field

from loreguard.memory.policy import episodic_strengths
from loreguard.memory.text import is_unspaced, stem, word_tokens
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import Belief, EpisodicEntry

#: Words too common to signal relevance.
STOPWORDS = frozenset(
    """a about after again all am an and any are as at be been but by can could did do does for
    from had has have he her here him his how i if in into is it its just me my no not now of on
    or our out over she so some than that the their them then there these they this to too up us
    was we were what when where which who why will with would you your yours""".split()
)


@lru_cache(maxsize=8192)
def keywords(text: str) -> frozenset[str]:
    """Folded content words of `text` in any script, each as its `stem` (so "quests" and "quest"
    are one keyword): stopwords out, and 1-2 letter words out except the two-character pieces of
    unspaced scripts (Chinese, Japanese)."""
    return frozenset(stem(w) for w in word_tokens(text) if (len(w) > 2 or is_unspaced(w)) and w not in STOPWORDS)


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


def score_episodic(entry: EpisodicEntry, query: RetrievalQuery, query_words: frozenset[str]) -> float:
    return _score_episodes([entry], query, query_words)[0]


def _score_episodes(entries: Sequence[EpisodicEntry], query: RetrievalQuery, query_words: frozenset[str]) -> list[float]:
    """Each entry's score (it runs for every entry of a scope on every interaction, so the
    query's parts are looked up once). The one formula: recency (strength over significance, at
    most 1), relevance and significance, weighted, rounded to 1e-9."""
    w = query.weights
    w_recency, w_relevance, w_significance = w.recency, w.relevance, w.significance
    strengths = episodic_strengths(entries, query.now_interaction, query.decay)
    n_words = len(query_words)
    return [
        round(
            w_recency * min(strength / max(entry.significance, 1e-9), 1.0)
            # `relevance`, inlined (a call per entry was a tenth of retrieval)
            + w_relevance * (len(keywords(entry.text) & query_words) / n_words if n_words else 0.0)
            + w_significance * entry.significance,
            9,
        )
        for entry, strength in zip(entries, strengths, strict=True)
    ]


def score_belief(belief: Belief, query: RetrievalQuery, query_words: frozenset[str]) -> float:
    w = query.weights
    return round(w.relevance * relevance(keywords(belief.content), query_words) + w.confidence * belief.confidence, 9)


def retrieve_episodic(entries: Iterable[EpisodicEntry], query: RetrievalQuery) -> tuple[tuple[EpisodicEntry, float], ...]:
    """The best `max_episodic` entries with their scores, in the documented order."""
    if not query.max_episodic:
        return ()  # a prompt without memories (the task does not need them)
    words = keywords(query.player_input)
    excluded = set(query.exclude_tags)
    kept = [e for e in entries if excluded.isdisjoint(e.tags)]
    # Sorted on (-score, -at_interaction, text, seq) built in place of a key function, then the
    # position (a stable sort's tie-break, should two entries share a seq), so the entry and
    # score that follow are never compared.
    scores = _score_episodes(kept, query, words)
    ranked = sorted(
        (-score, -e.at_interaction, e.text, e.seq, i, e, score) for i, (e, score) in enumerate(zip(kept, scores, strict=True))
    )
    return tuple((e, score) for *_, e, score in ranked[: query.max_episodic])


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
