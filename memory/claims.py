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

Claims without cues: where the other values an attribute takes are known (a state claim's
`values`, a canonical claim's `other_values`), a clause that names the subject and then, within
`CUELESS_WINDOW` words, one of those values asserts it with no cue at all ("the north gate stays
open all night" against `gate.north = closed`). A negation before the value ("never stays
open"), a question, a condition ("if the gate were open") or the holding value named first
("closed, and won't open") make it no assertion.

Text is compared in the one normaliser's form (`loreguard.schemas.text.norm_words`: homoglyphs,
zero-width characters, spacing); subjects also match in the plural ("gates").

Limits, honestly: "Edward rules as king" (no cue, and a name has no list of other values),
pronouns ("he is named Edward"), values split across clauses, and paraphrases are not caught;
a cue followed by a non-value ("is named after his father") is flagged. Designers choose cues
and other values per claim to fit their facts; the semantic judge gate covers paraphrase when
enabled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.memory import CanonicalFact, Claim, StateClaim
from loreguard.schemas.text import norm_words, stem

#: Cues used when a claim names none, by attribute.
DEFAULT_CUES: dict[str, tuple[str, ...]] = {
    "name": ("name is", "name was", "is named", "was named", "is called", "was called", "named", "called"),
    "location": ("is in", "is at", "lives in", "is located in", "can be found in", "was in"),
    "owner": ("is owned by", "belongs to", "was owned by"),
}
NEGATIONS = ("not", "never", "no longer", "isn t", "wasn t")
#: Words that negate a cue when they stand between the subject and the cue ("is not named").
_NEGATING_WORDS = frozenset({"not", "never", "isn", "wasn", "aren", "no"})
#: A clause and what ends it (a question asserts nothing without a cue).
_CLAUSE = re.compile(r"([^.!?;\n]+)([.!?;\n]*)")
#: How far after the subject a known other value may stand to be asserted without a cue.
CUELESS_WINDOW = 5
#: Words that make a clause no assertion of a cue-less value: negation, condition, wish, doubt.
_NOT_ASSERTING = frozenset(
    "not never no nor isn wasn aren weren won don doesn didn can cannot couldn shouldn wouldn "
    "if unless whether when once wish want hope would could should might may".split()
)
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


def _words(text: str) -> list[str]:
    return list(norm_words(text))


class _Compiled:
    """A claim's phrases as word lists, made once per claim: subjects (singular), values, cues
    (longest first), the known other values (longest first) and, per subject, its set of words
    (a text that holds every word of none of them cannot be about the claim)."""

    __slots__ = ("cues", "firsts", "others", "subjects", "values")  # firsts: each subject's word set

    def __init__(self, claim: Claim, known: tuple[str, ...]) -> None:
        self.subjects = tuple(s for s in ([stem(w) for w in _words(x)] for x in (claim.subject, *claim.subject_aliases)) if s)
        self.values = tuple(_words(v) for v in (claim.value, *claim.value_aliases))
        self.cues = tuple(sorted((_words(c) for c in claim_cues(claim)), key=len, reverse=True))
        own = self.values
        others = (p for p in (_words(x) for x in known) if p and p not in own)
        self.others = tuple(sorted(others, key=lambda p: (-len(p), p)))
        self.firsts = tuple(frozenset(s) for s in self.subjects)

    def named_in(self, seen: frozenset[str]) -> bool:
        for words in self.firsts:  # a loop, not any(): this runs for every claim of every text
            if words <= seen:
                return True
        return False


#: Compiled claims, keyed by the claim's strings rather than the claim: hashing a frozen model
#: field by field on every lookup costs more than the lookup saves.
_CACHE: dict[tuple[object, ...], _Compiled] = {}
_CACHE_MAX = 4096


def _compiled(claim: Claim, known: tuple[str, ...]) -> _Compiled:
    key = (claim.subject, claim.subject_aliases, claim.value, claim.value_aliases, claim.attribute, claim.cues, known)
    compiled = _CACHE.get(key)
    if compiled is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()  # designer data is small: a full cache means many profile changes
        compiled = _CACHE[key] = _Compiled(claim, known)
    return compiled


def _fact_claims(facts: tuple[CanonicalFact, ...]) -> tuple[tuple[CanonicalFact, Claim, _Compiled], ...]:
    """Every claim of `facts` with its compiled form, in fact order, then claim order."""
    return tuple((fact, claim, _compiled(claim, claim.other_values)) for fact in facts for claim in fact.claims)


#: Per tuple of fact objects: a snapshot's facts are one tuple until the designer registers
#: again, so the gate finds its claims compiled in one lookup.
_FACT_CLAIMS: IdentityMemo[tuple[tuple[CanonicalFact, Claim, _Compiled], ...]] = IdentityMemo(maxsize=256)


@lru_cache(maxsize=1024)
def _phrases(phrases: tuple[str, ...]) -> tuple[list[str], ...]:
    return tuple(p for p in (_words(x) for x in phrases) if p)


def _known_value_at(rest: list[str], known: tuple[list[str], ...]) -> int | None:
    """Where the first known value stands in the first `VALUE_WINDOW` words of `rest`, or None."""
    for start in range(min(VALUE_WINDOW, len(rest))):
        if any(rest[start : start + len(value)] == value for value in known):
            return start
    return None


def _subject_ends(stems: list[str], subjects: tuple[list[str], ...]) -> list[int]:
    """Where each mention of a subject ends in the clause, in order."""
    ends = []
    for subject in subjects:
        for i in range(len(stems) - len(subject) + 1):
            if stems[i : i + len(subject)] == subject:
                ends.append(i + len(subject))
    return sorted(set(ends))


def _check_cueless(tokens: list[str], stems: list[str], compiled: _Compiled, question: bool) -> str | None:
    """The other value a clause asserts of the claim's subject without a cue, or None."""
    others, values = compiled.others, compiled.values
    if question or not others:
        return None
    for end in _subject_ends(stems, compiled.subjects):
        if _NOT_ASSERTING.intersection(tokens[max(0, end - 4) : end]):
            continue
        for at in range(end, min(len(tokens), end + CUELESS_WINDOW)):
            if any(v and tokens[at : at + len(v)] == v for v in values):
                break  # the holding value named first: "closed, and won't open till dawn"
            hit = next((o for o in others if tokens[at : at + len(o)] == o), None)
            if hit is None:
                continue
            if not _NOT_ASSERTING.intersection(tokens[end:at]):
                return " ".join(hit)
            break
    return None


def _check_clause(
    tokens: list[str], stems: list[str], compiled: _Compiled, known: tuple[list[str], ...] = ()
) -> tuple[str, bool] | None:
    """(asserted value, negated) when the clause contradicts the claim through a cue, else None.
    With `known` values, only one of them after the cue is an assertion."""
    subjects, values, cues = compiled.subjects, compiled.values, compiled.cues
    for subject in subjects:
        for i in range(len(tokens) - len(subject) + 1):
            if stems[i : i + len(subject)] != subject:
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


@lru_cache(maxsize=1024)
def _clauses(text: str) -> tuple[tuple[tuple[list[str], list[str], bool], ...], frozenset[str]]:
    """Each clause's words, their singulars, and whether it is a question; and every singular."""
    out = []
    seen: set[str] = set()
    for match in _CLAUSE.finditer(text):
        tokens = _words(match.group(1))
        if tokens:
            stems = [stem(t) for t in tokens]
            seen.update(stems)
            out.append((tokens, stems, "?" in match.group(2)))
    return tuple(out), frozenset(seen)


def _contradicted(
    clauses: tuple[tuple[list[str], list[str], bool], ...], compiled: _Compiled, known: tuple[list[str], ...] = ()
) -> tuple[str, bool] | None:
    """The first clause's contradiction of a claim, with a cue or without: (asserted, negated)."""
    for tokens, stems, question in clauses:
        hit = _check_clause(tokens, stems, compiled, known)
        if hit is not None:
            return hit
        other = _check_cueless(tokens, stems, compiled, question)
        if other is not None:
            return other, False
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
    clauses, seen = _clauses(text)
    found = []
    facts = tuple(facts)
    for fact, claim, compiled in _FACT_CLAIMS.get(facts, lambda: _fact_claims(facts)):
        if not compiled.named_in(seen):
            continue  # the text never names the subject
        hit = _contradicted(clauses, compiled)
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
    claims_by_key = state_claims or {}
    for key, value in state:
        state_claim = claims_by_key.get(key)
        bound = state_claim.claim(value) if state_claim is not None else None
        if state_claim is None or bound is None:
            continue
        known_values = state_claim.known_values(value)
        compiled = _compiled(bound, known_values)
        if not compiled.named_in(seen):
            continue
        hit = _contradicted(clauses, compiled, _phrases(known_values))
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
    return found
