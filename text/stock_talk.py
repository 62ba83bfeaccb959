"""Whether a line says a trader has none of a ware: "I don't have any rope", "There's no bread
for sale", "We're out of lanterns", "Rope is sold out", "We don't sell lanterns here".

Not a denial: turning one buyer down ("I can't sell you the rope, dear: you're a silver short"),
which says nothing of the stock, and a question ("No rope?"). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from loreguard.text.negation import DENIALS
from loreguard.text.phrases import sentences
from loreguard.text.request_terms import CLAUSE_BREAK
from loreguard.text.words import stem, stems

#: Words that say the stock is gone, whatever the clause denies.
GONE = tuple(
    stems(p) for p in ("sold out", "out of", "none left", "no more", "not available", "unavailable", "run out", "ran out")
)
#: Verbs of having a ware that a denial before them makes a denial of stock ("don't have").
HAVING = frozenset(stems("have has got carry stock keep sell sale available left"))
#: Words that make a "sell" a refusal to this buyer, not a denial of stock ("can't sell you").
TO_THE_BUYER = frozenset(stems("you your yours"))
#: How many words before a ware a denial says there is none of it ("no rope", "no more rope").
NONE_REACH = 2
#: What makes a "none" one for nothing, not none at all ("no bread to give away").
FOR_NOTHING = tuple(stems(p) for p in ("give away", "to spare", "for free", "for nothing", "free of charge"))


def _has(words: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    return any(words[i : i + n] == needle for i in range(len(words) - n + 1))


def denied_ware(line: str, wares: Iterable[str]) -> str | None:
    """The first of `wares` that `line` says there is none of, or None."""
    names = {stem(ware): ware for ware in wares}
    for sentence in sentences(line):
        if sentence.rstrip().endswith("?"):
            continue
        for clause in CLAUSE_BREAK.split(sentence):
            words = stems(clause)
            named = [names[w] for w in words if w in names]
            if not named or any(_has(words, free) for free in FOR_NOTHING):
                continue
            if any(_has(words, gone) for gone in GONE):
                return named[0]
            if any(w in names and DENIALS.intersection(words[max(0, i - NONE_REACH) : i]) for i, w in enumerate(words)):
                if not TO_THE_BUYER.intersection(words):  # "no rope for you" turns a buyer down
                    return named[0]
            denial = next((i for i, w in enumerate(words) if w in DENIALS), None)
            if denial is None or TO_THE_BUYER.intersection(words[:denial]):
                continue  # "you don't have enough" is about the buyer's purse
            after = words[denial:]
            if HAVING.intersection(after) and not (stem("sell") in after and TO_THE_BUYER.intersection(after)):
                return named[0]
    return None
