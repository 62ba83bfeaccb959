"""How a trader's line speaks of its stock: whether it says it has none of a ware ("I don't
have any rope", "There's no bread for sale", "We're out of lanterns", "Rope is sold out", "We
don't sell lanterns here"), and what a request asks for that is not among the wares ("Can you
give me a torch?") and whether a reply offers it.

Not a denial: turning one buyer down ("I can't sell you the rope, dear: you're a silver short"),
which says nothing of the stock, and a question ("No rope?"). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from loreguard.text.negation import DENIALS
from loreguard.text.numbers import ONES, TENS
from loreguard.text.phrases import sentences
from loreguard.text.request_terms import CLAUSE_BREAK
from loreguard.text.words import contains_run, stem, stems

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


def denied_ware(line: str, wares: Iterable[str]) -> str | None:
    """The first of `wares` that `line` says there is none of, or None."""
    names = {stem(ware): ware for ware in wares}
    for sentence in sentences(line):
        if sentence.rstrip().endswith("?"):
            continue
        for clause in CLAUSE_BREAK.split(sentence):
            words = stems(clause)
            named = [names[w] for w in words if w in names]
            if not named or any(contains_run(words, free) for free in FOR_NOTHING):
                continue
            if any(contains_run(words, gone) for gone in GONE):
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


#: Words between the asking verb and what it asks for ("give me a torch", "sell us some more").
_BEFORE_THING = frozenset(
    "me us you him her them a an the some any more another one of few couple please just your my this that".split()
)
_ASKING_VERBS = frozenset(stems("give hand sell spare fetch bring trade buy purchase get have take want need like"))


def asked_thing(words: tuple[str, ...], wares: Iterable[str]) -> str | None:
    """What an asking sentence's words (stemmed, as `asking.asking_sentences` gives them) ask
    for, when it is not one of `wares`: the first word after the asking verb past "me", "a",
    "some"... ("Can you give me a torch?" -> torch); None for a ware or nothing."""
    names = {stem(ware) for ware in wares}
    at = next((i for i, w in enumerate(words) if w in _ASKING_VERBS), None)
    if at is None or names.intersection(words):  # a ware asked for ("a loaf of bread") is the deal's
        return None
    thing = next((w for w in words[at + 1 :] if w not in _BEFORE_THING and not w.isdigit() and w not in _COUNTS), None)
    return None if thing is None or thing in _ASKING_VERBS | _VAGUE else thing


_COUNTS = frozenset(stem(word) for word in (*ONES, *TENS, "dozen", "pair", "couple"))
#: Things too vague to be one the trader does not sell ("sell me something nice").
_VAGUE = frozenset(stems("something anything everything stuff thing things what whatever it them that those these"))


def offers_thing(line: str, thing: str) -> bool:
    """Whether `line` offers `thing` (stemmed): names it in a clause that denies nothing and asks
    nothing ("A torch, love. It's great for the dark nights!"; not "I don't sell torches")."""
    for sentence in sentences(line):
        if sentence.rstrip().endswith("?"):
            continue
        for clause in CLAUSE_BREAK.split(sentence):
            words = stems(clause)
            if thing in words and not DENIALS.intersection(words):
                return True
    return False
