"""Canonical-contradiction detection with structured claims.

A canonical fact may declare claims `subject.attribute = value` (king.name = Arthur). A clause
that names the subject and then says a value for the attribute asserts it; it contradicts the
fact when the value is not the canonical one (or an alias), or when the canonical value is
negated. A negated *other* value ("the king was never Edward") is consistent. This beats plain
substring negation, which flags "not Edward" and misses "Edward".

The forms a clause asserts a value in, each checked per claim:

1. a cue: the subject, then within `WINDOW_WORDS` words a cue ("is named", "closes at"), then
   the value ("the king is called Edward"; "the gate doesn't close at dusk" negates it);
2. no cue, where the attribute's other values are known (a state claim's `values`, a canonical
   claim's `other_values`): the subject, then within `CUELESS_WINDOW` words one of them ("the
   north gate stays open all night");
3. a negated cue verb with no value: "the gate never closes", "it doesn't shut" deny that it
   closes at dusk at all (unless the canonical value follows: "doesn't close until dusk");
4. for a name (a claim whose attribute is `name`): a copula and another name or person ("the
   king is Bob", "the king of Eldmoor is the captain's wife", "the king is my brother"); the
   subject used as a title ("King Edward", "the river Thames"); a name, then a copula and the
   subject ("Edward is the king") or one of the claim's `role_cues` ("Edward rules")
   (`loreguard.memory.claim_names`).

What makes a clause no assertion (questions, conditions, reported rumour), what denies it ("it is
not true that ...") and how a pronoun finds its subject ("Who is the king?" -> "His name is Bob")
is decided in `loreguard.text.clauses`.

It lives in memory because memory needs it too: a belief that contradicts a canonical claim is
marked `contradicted` when it is written or when the fact arrives (`transitions`), with the
same matcher the validation gate uses on dialogue.

World state can be contradicted too: a world-state key with a `StateClaim` (world definition,
`state_claims`) is checked the same way (forms 1 and 2), its value the key's at interaction time
("the gate is open" while `gate.north = "closed"`). A state claim that lists the values its key
takes reads only those words as a value, anywhere in the first `VALUE_WINDOW` words after the cue
("is now open"), so "the gate is that way" asserts nothing.

Text is compared in the one normaliser's form (`loreguard.schemas.text.norm_words`: homoglyphs,
zero-width characters, spacing); subjects also match in the plural ("gates").

Limits, honestly: values split across clauses, paraphrases ("the gate is shut at sundown" for
dusk) and a name said with no capital ("the king is bob") are not caught; a cue followed by a
non-value ("is named after his father") is flagged. Designers choose cues, other values and role
cues per claim to fit their facts; the semantic judge covers paraphrase when enabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from loreguard.memory.claim_names import COPULAS, NAME_ATTRIBUTE, contradicted_name
from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.memory import CanonicalFact, Claim, StateClaim
from loreguard.schemas.text import norm_words
from loreguard.text.clauses import (
    Clause,
    antecedent,
    denied,
    not_vouched,
    resolve_pronouns,
    split_clauses,
    subject_spans,
)
from loreguard.text.negation import COPULA_NEGATIONS, CUE_NEGATIONS, negation_starts
from loreguard.text.words import stem

#: Cues used when a claim names none, by attribute.
DEFAULT_CUES: dict[str, tuple[str, ...]] = {
    "name": ("name is", "name was", "is named", "was named", "is called", "was called", "named", "called"),
    "location": ("is in", "is at", "lives in", "is located in", "can be found in", "was in"),
    "owner": ("is owned by", "belongs to", "was owned by"),
}
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


def _find(tokens: tuple[str, ...], phrase: tuple[str, ...], start: int, limit: int) -> int | None:
    """Index of the first occurrence of `phrase` beginning in tokens[start:limit]."""
    n = len(phrase)
    for i in range(start, min(limit, len(tokens) - n + 1)):
        if tokens[i : i + n] == phrase:
            return i
    return None


def _strip_negation(rest: tuple[str, ...]) -> tuple[bool, tuple[str, ...]]:
    for neg in COPULA_NEGATIONS:
        parts = tuple(neg.split())
        if rest[: len(parts)] == parts:
            return True, rest[len(parts) :]
    return False, rest


def _verb_forms(cue: tuple[str, ...]) -> frozenset[str]:
    """The forms of a cue's verb ("closes at" -> close, closes, closed, closing), or none when the
    cue opens with a copula or a naming word ("is named")."""
    if not cue or cue[0] in COPULAS or cue[0] in {"are", "were", "has", "have", "name", "named", "called", "belongs"}:
        return frozenset()
    word = cue[0]
    bases = {word}
    if word.endswith("es"):
        bases.update({word[:-1], word[:-2]})
    elif word.endswith("s"):
        bases.add(word[:-1])
    forms: set[str] = set()
    for base in bases:
        forms.update({base, base + "s", base + "es", base + "d", base + "ed", base + "ing"})
        if base.endswith("e"):
            forms.add(base[:-1] + "ing")
    return frozenset(forms)


class _Compiled:
    """A claim's phrases as word tuples, made once per claim: subjects (singular), values, cues
    (longest first), the known other values (longest first), the cue verbs' forms, role cues and,
    per subject and role cue, its set of words (a text that holds every word of none of them
    cannot be about the claim)."""

    __slots__ = ("cues", "firsts", "is_name", "others", "roles", "subjects", "values", "verb_tails", "verbs")

    def __init__(self, claim: Claim, known: tuple[str, ...]) -> None:
        self.subjects = tuple(
            s for s in (tuple(stem(w) for w in norm_words(x)) for x in (claim.subject, *claim.subject_aliases)) if s
        )
        self.values = tuple(norm_words(v) for v in (claim.value, *claim.value_aliases))
        self.cues = tuple(sorted((norm_words(c) for c in claim_cues(claim)), key=len, reverse=True))
        own = self.values
        others = (p for p in (norm_words(x) for x in known) if p and p not in own)
        self.others = tuple(sorted(others, key=lambda p: (-len(p), p)))
        self.verbs = frozenset().union(*(_verb_forms(c) for c in self.cues)) if self.cues else frozenset()
        # what a verb cue says after its verb ("closes at" -> ("at",)), longest first
        tails = {c[1:] for c in self.cues if len(c) > 1 and _verb_forms(c)}
        self.verb_tails = tuple(sorted(tails, key=lambda t: (-len(t), t)))
        self.is_name = claim.attribute.strip().lower() == NAME_ATTRIBUTE
        self.roles = tuple(sorted((norm_words(r) for r in claim.role_cues), key=len, reverse=True))
        # a role cue makes a text about the claim without the subject: "Edward rules"
        roles = (tuple(stem(w) for w in r) for r in self.roles)
        self.firsts = tuple(frozenset(s) for s in (*self.subjects, *roles))

    def named_in(self, seen: frozenset[str]) -> bool:
        for words in self.firsts:  # a loop, not any(): this runs for every claim of every text
            if words <= seen:
                return True
        return False

    def is_value(self, words: tuple[str, ...]) -> bool:
        return any(v and words[: len(v)] == v for v in self.values)

    def value_at(self, tokens: tuple[str, ...], at: int) -> tuple[str, ...]:
        """The canonical value (or alias) that starts at `at`, or (); no copy of the tokens."""
        for v in self.values:
            if v and tokens[at : at + len(v)] == v:
                return v
        return ()


#: Compiled claims, keyed by the claim's strings rather than the claim: hashing a frozen model
#: field by field on every lookup costs more than the lookup saves.
_CACHE: dict[tuple[object, ...], _Compiled] = {}
_CACHE_MAX = 4096


def _compiled(claim: Claim, known: tuple[str, ...]) -> _Compiled:
    key = (
        claim.subject, claim.subject_aliases, claim.value, claim.value_aliases, claim.attribute, claim.cues,
        claim.role_cues, known,
    )  # fmt: skip
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
def _phrases(phrases: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(p for p in (norm_words(x) for x in phrases) if p)


def _known_value_at(rest: tuple[str, ...], known: tuple[tuple[str, ...], ...]) -> int | None:
    """Where the first known value stands in the first `VALUE_WINDOW` words of `rest`, or None."""
    for start in range(min(VALUE_WINDOW, len(rest))):
        if any(rest[start : start + len(value)] == value for value in known):
            return start
    return None


def _by_cue(clause: Clause, compiled: _Compiled, known: tuple[tuple[str, ...], ...] = ()) -> tuple[str, bool] | None:
    """Form 1: (asserted value, negated) when the clause contradicts the claim through a cue.
    With `known` values, only one of them after the cue is an assertion."""
    tokens = clause.tokens
    values, cues = compiled.values, compiled.cues
    for start, end in subject_spans(clause.stems, compiled.subjects):
        for cue in cues:
            at = _find(tokens, cue, end, end + WINDOW_WORDS)
            if at is None:
                continue
            if not_vouched(clause, start):
                return None
            negated_before = bool(CUE_NEGATIONS.intersection(tokens[max(end, clause.phrase_start(at)) : at]))
            negated_after, rest = _strip_negation(tokens[at + len(cue) :])
            negated = (negated_before != negated_after) != denied(clause, start)
            while rest and (rest[0] in _ARTICLES or rest[0] in _VOUCHING):
                rest = rest[1:]  # "the king's name is indeed Arthur" says Arthur
            if known:
                first = _known_value_at(rest, known)
                if first is None:
                    break
                # "is now not open": a negation among the words skipped still negates
                negated ^= bool(CUE_NEGATIONS.intersection(rest[:first]))
                rest = rest[first:]
            if not rest:
                break
            matches_canonical = any(rest[: len(v)] == v for v in values if v)
            if matches_canonical == negated:
                named = next((v for v in sorted(known, key=len, reverse=True) if rest[: len(v)] == v), None)
                return " ".join(named) if named is not None else _value_said(clause, len(tokens) - len(rest)), negated
            break  # the first cue after this subject decides
    return None


#: Adverbs that vouch for the value a cue asserts, not part of it: "is indeed Arthur", "is
#: truly Edward" (the 1.5B's merchant agreeing with canon was refused for "indeed arthur").
_VOUCHING = frozenset("indeed truly really certainly surely actually definitely clearly still always now currently".split())


#: Words that end the value a cue asserts: what follows them is another clause ("is named Sir
#: Valor and he rules well" asserts "sir valor", not "sir valor and").
_VALUE_ENDS = frozenset("and or but nor who whom which that he she they it we i you because since so when while if as".split())


def _value_said(clause: Clause, at: int) -> str:
    """The value a cue asserts from word `at`: up to three words, to the end of its phrase."""
    words: list[str] = []
    for i in range(at, min(len(clause.tokens), at + 3)):
        if clause.tokens[i] in _VALUE_ENDS or (i > at and i in clause.breaks):
            break
        words.append(clause.tokens[i])
    return " ".join(words or clause.tokens[at : at + 1])


def _without_cue(clause: Clause, compiled: _Compiled) -> str | None:
    """Form 2: the other value a clause asserts of the claim's subject without a cue, or None."""
    others, values, tokens = compiled.others, compiled.values, clause.tokens
    if not others:
        return None
    for start, end in subject_spans(clause.stems, compiled.subjects):
        if _NOT_ASSERTING.intersection(tokens[max(0, end - 4) : end]) or not_vouched(clause, start) or denied(clause, start):
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


#: Words after a negated verb that make it a matter of degree, not a denial ("doesn't cost much").
_DEGREE = frozenset("much more less enough too so that as many any anything extra".split())


#: Words that may follow a negated cue verb in a denial ("never closes", "won't close again",
#: "doesn't close at all"); any other ("never closes early", "won't close on you") makes it a
#: statement about something else.
_DENIAL_TAIL = frozenset("ever anymore again for not now tonight today nowadays".split())


def _by_negated_verb(clause: Clause, compiled: _Compiled) -> tuple[str, bool] | None:
    """Form 3: a cue's verb negated. With nothing after it ("the gate never closes") it denies
    the fact: (the words of the denial, False). Followed by the cue's own tail and the canonical
    value ("doesn't close at dusk") it negates the value: (value, True). None otherwise."""
    if not compiled.verbs:
        return None
    tokens = clause.tokens
    for start, end in subject_spans(clause.stems, compiled.subjects):
        for at in range(end, min(len(tokens), end + WINDOW_WORDS)):
            if tokens[at] not in compiled.verbs:
                continue
            # a negation in another phrase of the clause negates another verb
            negations = negation_starts(tokens, max(end, clause.phrase_start(at)), at)
            if not negations:
                if any(compiled.value_at(tokens, i) for i in range(at + 1, min(len(tokens), at + 4))):
                    break  # "closes at dusk and never closes for long": the value that holds, said
                continue  # "the gate's closing is never closes" (the 1.5B): the noun before the verb
            if not_vouched(clause, start) or denied(clause, start):
                break
            after = at + 1
            tail = next((t for t in compiled.verb_tails if tokens[after : after + len(t)] == t), None)
            if tail is not None and tokens[after + len(tail) : after + len(tail) + 2] != ("at", "all")[len(tail) - 1 :]:
                value = compiled.value_at(tokens, after + len(tail))
                return (" ".join(value), True) if value else None
            word = tokens[after] if after < len(tokens) and after not in clause.breaks else None
            if word is not None and word not in _DENIAL_TAIL and tokens[after : after + 2] != ("at", "all"):
                break  # "never closes early": about something else (a new phrase is no complement)
            if any(compiled.value_at(tokens, i) for i in range(after, len(tokens))):
                break  # "doesn't close until dusk": the value said after all
            return " ".join(tokens[negations[0] : at + 1]).replace(" t ", "'t "), False
    return None


def _contradicted(
    clauses: tuple[Clause, ...], compiled: _Compiled, known: tuple[tuple[str, ...], ...] = (), *, state: bool = False
) -> tuple[str, bool] | None:
    """The first clause's contradiction of a claim, in any form: (asserted, negated). A state
    claim is read in forms 1 and 2 only."""
    for clause in clauses:
        hit = _by_cue(clause, compiled, known)
        if hit is not None:
            return hit
        other = _without_cue(clause, compiled)
        if other is not None:
            return other, False
        if state:
            continue
        denial = _by_negated_verb(clause, compiled)
        if denial is not None:
            return denial
        name = contradicted_name(clause, compiled) if compiled.is_name else None
        if name is not None:
            return name
    return None


def find_contradictions(
    text: str,
    facts: Iterable[CanonicalFact],
    state: Iterable[tuple[str, JsonScalar]] = (),
    state_claims: Mapping[str, StateClaim] | None = None,
    *,
    context: str = "",
) -> list[Contradiction]:
    """Every claim of `facts` that `text` contradicts, in fact order, then clause order; then
    every claim of a `state` key (by `state_claims`, with the key's value) it contradicts, in
    `state` order. `context`: what the text answers (the player's line), where a pronoun of the
    text's first clause may find its subject."""
    clauses, seen = split_clauses(text)
    context_clauses, context_seen = split_clauses(context) if context else ((), frozenset())
    found = []
    facts = tuple(facts)
    for fact, claim, compiled in _FACT_CLAIMS.get(facts, lambda: _fact_claims(facts)):
        hit = _claim_hit(clauses, seen, context_clauses, context_seen, compiled)
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
        hit = _claim_hit(clauses, seen, context_clauses, context_seen, compiled, _phrases(known_values))
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


def _claim_hit(
    clauses: tuple[Clause, ...],
    seen: frozenset[str],
    context_clauses: tuple[Clause, ...],
    context_seen: frozenset[str],
    compiled: _Compiled,
    known: tuple[tuple[str, ...], ...] | None = None,
) -> tuple[str, bool] | None:
    """A claim's contradiction in the text's clauses, pronouns resolved, or None."""
    if not compiled.named_in(seen) and not (context_seen and compiled.named_in(context_seen)):
        return None  # neither the text nor what it answers names the subject
    # the player's last clause is where the reply's first pronoun may find its subject
    asked = bool(context_clauses) and antecedent(context_clauses[-1], compiled.subjects)
    resolved = resolve_pronouns(clauses, compiled.subjects, asked)
    if known is None:
        return _contradicted(resolved, compiled)
    return _contradicted(resolved, compiled, known, state=True)
