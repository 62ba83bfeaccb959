"""Negation: the one list of words that negate what follows them, and the words that deny.

Every reader of English in Loreguard asks this module: the gate's checks (a grant said but
refused, a forbidden phrase said only to refuse it, a premise doubted), memory's claim reading
("the gate is not open") and the reading of requests ("I don't need rope"). Words are as
`words.word_tokens` splits them: "don't" is "don", "t", so the contraction's "t" is the
negation and "won't" never makes "won" one ("I won the race").
"""

from __future__ import annotations

#: Words that negate what follows them.
NEGATIONS = frozenset({"not", "t", "no", "nothing", "never", "nor", "neither", "none", "nobody"})
#: Words that deny what follows them in their clause ("I can't just let you go on through", "I
#: cannot sell it for free"): a negation, or a refusal's own word.
DENIALS = NEGATIONS | {"cannot", "cant", "nay"}
#: How a copula's value is negated ("is not open", "is no longer open", "isn't open"), as
#: `words.word_tokens` splits them: what memory's claim reading strips before a value.
COPULA_NEGATIONS = ("not", "never", "no longer", "isn t", "wasn t")
#: Their first words, and "aren", "no": what negates a cue standing between a subject and it ("the
#: gate is not named"). Not "won't" or "doesn't": "the gate won't wait, it closes at dusk" negates
#: another verb.
CUE_NEGATIONS = frozenset(phrase.split()[0] for phrase in COPULA_NEGATIONS) | {"aren", "no"}
#: How many words before a term a negation still reaches ("nothing's for free").
NEGATION_REACH = 3


def negated_within(words: tuple[str, ...], at: int, reach: int = NEGATION_REACH) -> bool:
    """Whether a negation stands among the `reach` words before position `at`."""
    return not NEGATIONS.isdisjoint(words[max(0, at - reach) : at])


def negation_starts(words: tuple[str, ...], start: int, end: int) -> list[int]:
    """Where each denial (`DENIALS`) in words[start:end] begins: a contraction's at its verb
    ("doesn't" -> the "doesn" of "doesn", "t"), so the words from there read as said."""
    found: list[int] = []
    for i in range(max(start, 0), min(end, len(words))):
        if words[i] in DENIALS:
            begins = i - 1 if words[i] == "t" and i > start else i
            if not found or found[-1] != begins:
                found.append(begins)
    return found
