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

World state can be contradicted too: a world-state key with a `StateClaim` (world definition,
`state_claims`) is checked the same way, its value the key's at interaction time ("the gate is
open" while `gate.north = "closed"`). A state claim that lists the values its key takes reads
only those words as a value, anywhere in the first `VALUE_WINDOW` words after the cue ("is now
open"), so "the gate is that way" asserts nothing.

Limits, honestly: only the cue patterns are understood. "Edward rules as king" (no cue),
pronouns ("he is named Edward"), values split across clauses, and paraphrases are not caught;
a cue followed by a non-value ("is named after his father") is flagged. Designers choose cues
per claim to fit their facts; the semantic judge gate covers paraphrase when enabled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from loreguard.memory.text import words
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.memory import CanonicalFact, Claim, StateClaim

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
#: How far after a cue a state claim's listed value may stand ("is now open", "is still shut").
VALUE_WINDOW = 3


class Contradiction(FrozenModel):
    #: The canonical fact whose claim is contradicted; "" for a world-state key's claim.
    fact_id: str
    subject: str
    attribute: str
    #: The value that holds: the fact's, or the world-state key's at interaction time.
    canonical_value: str
    asserted: str
    negated: bool
    #: The world-state key whose claim is contradicted; "" for a canonical fact's.
    state_key: str = ""

    @property
    def label(self) -> str:
        """What was contradicted, as the prompt's context keys name it: `canonical:ID` or
        `world_state:KEY`."""
        return f"world_state:{self.state_key}" if self.state_key else f"canonical:{self.fact_id}"


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


@lru_cache(maxsize=1024)
def _phrases(phrases: tuple[str, ...]) -> tuple[list[str], ...]:
    return tuple(p for p in (words(x).split() for x in phrases) if p)


def _known_value_at(rest: list[str], known: tuple[list[str], ...]) -> int | None:
    """Where the first known value stands in the first `VALUE_WINDOW` words of `rest`, or None."""
    for start in range(min(VALUE_WINDOW, len(rest))):
        if any(rest[start : start + len(value)] == value for value in known):
            return start
    return None


def _check_clause(tokens: list[str], claim: Claim, known: tuple[list[str], ...] = ()) -> tuple[str, bool] | None:
    """(asserted value, negated) when the clause contradicts `claim`, else None. With `known`
    values, only one of them after the cue is an assertion."""
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
                if known:
                    start = _known_value_at(rest, known)
                    if start is None:
                        break
                    # "is now not open": a negation among the words skipped still negates
                    negated ^= bool(_NEGATING_WORDS.intersection(rest[:start]))
                    rest = rest[start:]
                if not rest:
                    break
                matches_canonical = any(rest[: len(v)] == v for v in values if v)
                if matches_canonical == negated:
                    named = next((v for v in sorted(known, key=len, reverse=True) if rest[: len(v)] == v), rest[:3])
                    return " ".join(named), negated
                break  # the first cue after this subject decides
    return None


def find_contradictions(
    text: str,
    facts: Iterable[CanonicalFact],
    state: Iterable[tuple[str, JsonScalar]] = (),
    state_claims: Mapping[str, StateClaim] | None = None,
) -> list[Contradiction]:
    """Every claim of `facts` that `text` contradicts, in fact order, then clause order; then
    every claim of a `state` key (by `state_claims`, with the key's value) it contradicts, in
    `state` order."""
    clauses = [words(c).split() for c in _CLAUSE.split(text) if c.strip()]
    found = []
    for fact in facts:
        for claim in fact.claims:
            for tokens in clauses:
                hit = _check_clause(tokens, claim)
                if hit is not None:
                    found.append(
                        Contradiction(
                            fact_id=fact.id,
                            subject=claim.subject,
                            attribute=claim.attribute,
                            canonical_value=claim.value,
                            asserted=hit[0],
                            negated=hit[1],
                        )
                    )
                    break
    claims_by_key = state_claims or {}
    for key, value in state:
        state_claim = claims_by_key.get(key)
        bound = state_claim.claim(value) if state_claim is not None else None
        if state_claim is None or bound is None:
            continue
        known = _phrases(state_claim.known_values(value))
        for tokens in clauses:
            hit = _check_clause(tokens, bound, known)
            if hit is not None:
                found.append(
                    Contradiction(
                        fact_id="",
                        subject=bound.subject,
                        attribute=bound.attribute,
                        canonical_value=bound.value,
                        asserted=hit[0],
                        negated=hit[1],
                        state_key=key,
                    )
                )
                break
    return found
