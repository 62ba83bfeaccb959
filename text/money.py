"""Money a line names: "Here's 5 silver", "two gold and a copper", "a silver coin".

`money_named` adds up every amount of a currency the line states (not asks: "Five silver?" names
none), a number or "a"/"an" right before a currency word, in the currency's worth in the smallest
one. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

from loreguard.text.numbers import read_numbers
from loreguard.text.words import stem


def money_named(line: str, currencies: Mapping[str, int]) -> int:
    """The money `line` states, in the smallest currency (`currencies`: name -> worth); 0 when
    it states none."""
    worth = {stem(name): value for name, value in currencies.items()}
    total = 0
    for clause in read_numbers(line):
        if clause.question:
            continue
        counted = set()
        for number in clause.numbers:
            if stem(number.head) in worth:
                total += int(number.value) * worth[stem(number.head)]
                counted.add(number.end)
        for at, word in enumerate(clause.words):
            if stem(word) in worth and at not in counted and at > 0 and clause.words[at - 1] in ("a", "an"):
                total += worth[stem(word)]
    return total


def money_text(value: int, currencies: Mapping[str, int]) -> str:
    """`value` (in the smallest currency) as a person says it: "3 silver and 5 copper",
    the largest currencies first; "nothing" for 0."""
    parts = []
    left = value
    for name, worth in sorted(currencies.items(), key=lambda item: (-item[1], item[0])):
        count, left = divmod(left, worth)
        if count:
            parts.append(f"{count} {name}")
    if not parts:
        return "nothing"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"
