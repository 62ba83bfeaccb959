"""Requests worded in terms a rule forbids: "Can I have some bread for free?" to a merchant whose
rule `no_free_goods` lists "for free" among its `forbidden_requests`.

A grant agrees to the request as the player worded it, so such a request is not the NPC's to
grant (`intents.intent_table` refuses it). A term counts where a sentence that asks for the act
says it ("Give me two lanterns free of charge"), or where the sentence right after opens with it
("Give me some bread. For free, of course."), and not where a negation stands just before it
("Sell me some bread, I know nothing's for free."). Only the values the terms' sentence names are
refused ("I'd like a lantern. Can I have some bread for free?" refuses the bread alone); a
sentence that names none refuses every value asked for. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from loreguard.text.asking import Asking
from loreguard.text.negation import DENIALS, negated_within
from loreguard.text.phrases import contains_phrase
from loreguard.text.words import match_form, stems

#: Words a sentence may open with before the term it adds to the request ("And for free?").
_OPENERS = frozenset({"and", "oh", "all", "but", "so", "well", "um", "er", "of", "course"})


def _says(words: tuple[str, ...], needle: tuple[str, ...], *, unless_negated: bool = True) -> bool:
    """Whether `needle` stands in `words` (with no negation just before it, by default)."""
    n = len(needle)
    return any(
        words[i : i + n] == needle and not (unless_negated and negated_within(words, i)) for i in range(len(words) - n + 1)
    )


#: Where one clause of a line ends and the next begins: a denial governs only its own.
CLAUSE_BREAK = re.compile(r"[.!?;:,\u2014\u2013]+|\s-\s|\bbut\b", re.IGNORECASE)


def said_only_to_deny(text: str, phrase: str) -> bool:
    """Whether each clause of `text` that says `phrase` has a negation before it: "No, love. Not
    for free." and "I can't give you bread for free." refuse a request in the terms a rule
    forbids; they do not grant it (the gate's `forbidden_phrases` check lets them be). A clause
    of its own without one ("Take it, no charge, for free."), a copy disguised (spelled out,
    look-alike letters) beside a denied one, or the phrase across a clause's end ("for... free")
    is the phrase said."""
    needle = stems(phrase)
    pieces = CLAUSE_BREAK.split(text)
    clauses = [c for c in pieces if contains_phrase(c, phrase)]
    if not needle or not clauses:
        return False
    for clause in clauses:
        words = stems(match_form(clause))  # the form the phrase check reads: disguises undone
        found = [i for i in range(len(words) - len(needle) + 1) if words[i : i + len(needle)] == needle]
        if not found or any(not DENIALS.intersection(words[:i]) for i in found):
            return False
    # the rest may still say it across a clause's end: "Not for free. Take it for... free."
    return not contains_phrase(" ".join(p for p in pieces if p not in clauses), phrase)


def _opens_with(words: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    at = 0
    while at < len(words) and words[at] in _OPENERS and words[at : at + len(needle)] != needle:
        at += 1
    return bool(needle) and words[at : at + len(needle)] == needle


def forbidding_term(asking: Asking, terms: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """The first (rule id, phrase) of `terms` the asking sentence words its request in, or None."""
    for rule_id, phrase in terms:
        needle = stems(phrase)
        if needle and (_says(asking.words, needle) or _opens_with(asking.after, needle)):
            return rule_id, phrase
    return None


def refusing(
    askings: Iterable[Asking], terms: tuple[tuple[str, str], ...], values: Iterable[str]
) -> list[tuple[frozenset[str], str, str]]:
    """For each asking sentence worded in a forbidden term: the values of `values` it names (all
    of them when it names none), the rule id and the phrase; in the line's order."""
    stemmed = {value: stems(value) for value in values}
    out = []
    for asking in askings:
        term = forbidding_term(asking, terms)
        if term is None:
            continue
        named = frozenset(v for v, needle in stemmed.items() if needle and _says(asking.words, needle, unless_negated=False))
        out.append((named or frozenset(stemmed), *term))
    return out
