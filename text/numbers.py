"""Numbers as dialogue states them: digits or words, and the word that follows them.

`read_numbers` splits text into clauses and words (folded as everywhere else) and finds every
number: digits ("500", "1,000", "2.5"), number words ("fifty", "five hundred and twenty",
"a dozen"), or digits with a scale ("5 thousand"). Ordinals ("first", "3rd") are not numbers.
Each number comes with its *head*, the word after it, which is what it counts or measures
("two guards", "500 gold", "6 o'clock"); `grounding` decides from the head what a number is
about. Pure and deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from loreguard.schemas.text import fold

ONES = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
#: Multipliers that close a group ("five hundred", "two thousand").
SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
DOZEN = 12

#: A clause ends at . ! ? ; or a line break; a point between digits is a decimal point.
_CLAUSE = re.compile(r"[!?;\n]+|\.(?!\d)|(?<!\d)\.")
#: Digits (with thousands commas and a decimal part), or a run of letters of any script.
_TOKEN = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|[^\W\d_]+")
_ORDINAL_SUFFIXES = frozenset({"st", "nd", "rd", "th"})


@dataclass(frozen=True)
class Number:
    """One number in a clause: its value, the tokens it spans, and the word after it."""

    value: float
    start: int
    end: int
    #: The number as written (folded), e.g. "five hundred".
    text: str
    #: The word right after the number, "" at the end of the clause.
    head: str
    #: The word right before the number, "" at the start of the clause.
    before: str


@dataclass(frozen=True)
class Clause:
    words: tuple[str, ...]
    numbers: tuple[Number, ...]
    #: The clause ends with a question mark: what it says is asked, not stated.
    question: bool = False


def _tokens(clause: str) -> list[str]:
    """Words and digit groups of a clause. A digit group glued to an ordinal suffix ("3rd")
    becomes the word it is, so it is no number."""
    found: list[str] = []
    matches = list(_TOKEN.finditer(clause))
    skip = False
    for i, m in enumerate(matches):
        if skip:
            skip = False
            continue
        token = m.group()
        nxt = matches[i + 1] if i + 1 < len(matches) else None
        if token[0].isdigit() and nxt is not None and nxt.start() == m.end() and nxt.group() in _ORDINAL_SUFFIXES:
            found.append(token + nxt.group())
            skip = True
            continue
        found.append(token)
    return found


def _digits(token: str) -> float | None:
    if not token[0].isdigit() or not token[-1].isdigit():
        return None
    return float(token.replace(",", ""))


#: What may follow each kind of word inside one number ("twenty five", "five hundred and two").
_FOLLOWS = {
    "": {"digits", "ones", "teens", "tens"},
    "digits": {"scale", "hundred", "dozen"},
    "ones": {"scale", "hundred", "dozen"},
    "teens": {"scale", "hundred", "dozen"},
    "tens": {"ones", "scale", "dozen"},
    "hundred": {"ones", "teens", "tens", "scale", "and"},
    "scale": {"ones", "teens", "tens", "and"},
    "and": {"ones", "teens", "tens"},
    "dozen": set(),
}


def _kind(word: str) -> str:
    if word in ONES:
        return "teens" if ONES[word] >= 10 else "ones"
    if word in TENS:
        return "tens"
    if word == "hundred":
        return "hundred"
    if word in SCALES:
        return "scale"
    if word in ("dozen", "and"):
        return word
    return "digits" if _digits(word) is not None else ""


def _read_at(words: tuple[str, ...], i: int) -> tuple[float, int] | None:
    """The number starting at words[i] and the index after it, or None."""
    n = len(words)
    j, last = i, ""
    total, group = 0.0, 0.0
    if words[i] in ("a", "an"):
        # "a hundred", "a dozen"; any other "a" is an article.
        if i + 1 >= n or _kind(words[i + 1]) not in ("hundred", "scale", "dozen"):
            return None
        group, last, j = 1.0, "ones", i + 1
    while j < n:
        word = words[j]
        kind = _kind(word)
        if not kind or kind not in _FOLLOWS[last]:
            break
        if kind == "and" and (j + 1 >= n or _kind(words[j + 1]) not in _FOLLOWS["and"]):
            break  # "a hundred and a half", "five hundred and you": the number ended before "and"
        if kind == "digits":
            group = _digits(word) or 0.0
        elif kind in ("ones", "teens", "tens"):
            group += ONES.get(word, TENS.get(word, 0))
        elif kind == "hundred":
            group *= 100
        elif kind == "scale":
            total += group * SCALES[word]
            group = 0.0
        elif kind == "dozen":
            group *= DOZEN
        last = kind
        j += 1
    if last in ("", "and"):
        return None
    return total + group, j


@lru_cache(maxsize=4096)
def read_numbers(text: str) -> tuple[Clause, ...]:
    """Every clause of `text`, as words, with the numbers it states."""
    clauses = []
    folded = fold(text)
    parts: list[tuple[str, bool]] = []
    at = 0
    for delimiter in _CLAUSE.finditer(folded):
        parts.append((folded[at : delimiter.start()], "?" in delimiter.group(0)))
        at = delimiter.end()
    parts.append((folded[at:], False))
    for part, question in parts:
        words = tuple(_tokens(part))
        if not words:
            continue
        numbers = []
        i = 0
        while i < len(words):
            read = _read_at(words, i)
            if read is None:
                i += 1
                continue
            value, end = read
            numbers.append(
                Number(
                    value=value,
                    start=i,
                    end=end,
                    text=" ".join(words[i:end]),
                    head=words[end] if end < len(words) else "",
                    before=words[i - 1] if i > 0 else "",
                )
            )
            i = end
        clauses.append(Clause(words=words, numbers=tuple(numbers), question=question))
    return tuple(clauses)


def parse_number(text: str) -> tuple[float, str] | None:
    """A value written as one number and at most one word after it ("50", "fifty", "5 silver"):
    the number and that word (or ""); None for anything else."""
    clauses = read_numbers(text)
    if len(clauses) != 1 or len(clauses[0].numbers) != 1:
        return None
    (number,) = clauses[0].numbers
    words = clauses[0].words
    if number.start != 0 or len(words) - number.end > 1:
        return None
    return number.value, number.head
