"""Canonical-contradiction detection with structured claims.

A canonical fact may declare claims `subject.attribute = value` (king.name = Arthur). A clause
that mentions the subject, then an attribute cue ("is named", "is called"), then a value
asserts that value. It contradicts the fact when the value is not the canonical one (or an
alias), or when the canonical value is negated ("is not named Arthur"). A negated *other* value
("is not named Edward") is consistent. This beats plain substring negation, which flags
"not Edward" and misses "Edward".

It lives in memory because memory needs it too: a belief that contradicts a canonical claim is
marked `contradicted` when it is written or when the fact arrives (`transitions`), with the
same matcher the validation gate uses on dialogue.

Limits, honestly: only the cue patterns are understood. "Edward rules as king" (no cue),
pronouns ("he is named Edward"), values split across clauses, and paraphrases are not caught;
a cue followed by a non-value ("is named after his father") is flagged. Designers choose cues
per claim to fit their facts; the semantic judge gate covers paraphrase when enabled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from loreguard.memory.text import words
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import CanonicalFact, Claim

#: Cues used when a claim names none, by attribute.
DEFAULT_CUES: dict[str, tuple[str, ...]] = {
    "name": ("name is", "name was", "is named", "was named", "is called", "was called", "named", "called"),
    "location": ("is in", "is at", "lives in", "is located in", "can be found in", "was in"),
    "owner": ("is owned by", "belongs to", "was owned by"),
}
NEGATIONS = ("not", "never", "no longer", "isn t", "wasn t")
#: Words that negate a cue when they stand between the subject and the cue ("is not named").
_NEGATING_WORDS = frozenset({"not", "never", "isn", "wasn", "aren", "no"})
_CLAUSE = re.compile(r"[.!?;\n]+")
_ARTICLES = frozenset({"a", "an", "the"})
WINDOW_WORDS = 6


class Contradiction(FrozenModel):
    fact_id: str
    subject: str
    attribute: str
    canonical_value: str
    asserted: str
    negated: bool


def claim_cues(claim: Claim) -> tuple[str, ...]:
    if claim.cues:
        return claim.cues
    attr = claim.attribute.lower()
    return DEFAULT_CUES.get(attr, (f"{attr} is", f"{attr} was"))


def _find(tokens: list[str], phrase: list[str], start: int, limit: int) -> int | None:
    """Index of the first occurrence of `phrase` beginning in tokens[start:limit]."""
    n = len(phrase)
    for i in range(start, min(limit, len(tokens) - n + 1)):
        if tokens[i : i + n] == phrase:
            return i
    return None


def _strip_negation(rest: list[str]) -> tuple[bool, list[str]]:
    for neg in NEGATIONS:
        parts = neg.split()
        if rest[: len(parts)] == parts:
            return True, rest[len(parts) :]
    return False, rest


@lru_cache(maxsize=4096)
def _compiled(claim: Claim) -> tuple[tuple[list[str], ...], tuple[list[str], ...], tuple[list[str], ...]]:
    """Subjects, values and cues of a claim as word lists; cues longest first."""
    subjects = tuple(words(s).split() for s in (claim.subject, *claim.subject_aliases))
    values = tuple(words(v).split() for v in (claim.value, *claim.value_aliases))
    cues = tuple(sorted((words(c).split() for c in claim_cues(claim)), key=len, reverse=True))
    return subjects, values, cues


def _check_clause(tokens: list[str], fact: CanonicalFact, claim: Claim) -> Contradiction | None:
    subjects, values, cues = _compiled(claim)
    for subject in subjects:
        for i in range(len(tokens) - len(subject) + 1):
            if tokens[i : i + len(subject)] != subject:
                continue
            after_subject = i + len(subject)
            for cue in cues:
                at = _find(tokens, cue, after_subject, after_subject + WINDOW_WORDS)
                if at is None:
                    continue
                negated_before = bool(_NEGATING_WORDS.intersection(tokens[after_subject:at]))
                negated_after, rest = _strip_negation(tokens[at + len(cue) :])
                negated = negated_before != negated_after
                while rest and rest[0] in _ARTICLES:
                    rest = rest[1:]
                if not rest:
                    break
                matches_canonical = any(rest[: len(v)] == v for v in values if v)
                if matches_canonical == negated:
                    return Contradiction(
                        fact_id=fact.id,
                        subject=claim.subject,
                        attribute=claim.attribute,
                        canonical_value=claim.value,
                        asserted=" ".join(rest[:3]),
                        negated=negated,
                    )
                break  # the first cue after this subject decides
    return None


def find_contradictions(text: str, facts: Iterable[CanonicalFact]) -> list[Contradiction]:
    """Every claim of `facts` that `text` contradicts, in fact order, then clause order."""
    clauses = [words(c).split() for c in _CLAUSE.split(text) if c.strip()]
    found = []
    for fact in facts:
        for claim in fact.claims:
            for tokens in clauses:
                hit = _check_clause(tokens, fact, claim)
                if hit is not None:
                    found.append(hit)
                    break
    return found
