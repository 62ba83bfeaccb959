"""Reading numbers the way dialogue states them (text/numbers.py)."""

from __future__ import annotations

import pytest

from loreguard.text.numbers import parse_number, read_numbers


def _read(text: str) -> list[tuple[float, str, str]]:
    return [(n.value, n.text, n.head) for clause in read_numbers(text) for n in clause.numbers]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A sword costs 500 gold.", [(500, "500", "gold")]),
        ("fifty gold", [(50, "fifty", "gold")]),
        ("Five hundred and fifty coins!", [(550, "five hundred and fifty", "coins")]),
        ("Twenty-five guards", [(25, "twenty five", "guards")]),
        ("a dozen eggs and a hundred men", [(12, "a dozen", "eggs"), (100, "a hundred", "men")]),
        ("1,000 gold or 2.5 silver. Done.", [(1000, "1,000", "gold"), (2.5, "2.5", "silver")]),
        ("5 thousand", [(5000, "5 thousand", "")]),
        ("two hundred thousand", [(200_000, "two hundred thousand", "")]),
        ("Come at 6 o'clock", [(6, "6", "o")]),
        ("FIFTY Gold", [(50, "fifty", "gold")]),
    ],
)
def test_numbers_in_digits_and_words_with_the_word_after_them(text: str, expected: list) -> None:
    assert _read(text) == expected


@pytest.mark.parametrize("text", ["the first time", "the 3rd time", "a man", "at dusk", "the second gate", "none of them"])
def test_ordinals_articles_and_words_are_not_numbers(text: str) -> None:
    assert _read(text) == []


def test_a_number_stops_where_its_grammar_does() -> None:
    assert _read("a hundred and a half") == [(100, "a hundred", "and")]
    assert _read("one two") == [(1, "one", "two"), (2, "two", "")]
    assert [len(c.numbers) for c in read_numbers("It costs 2.5 gold. Then 3 more.")] == [1, 1]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("50", (50, "")), ("fifty", (50, "")), ("5 silver", (5, "silver")), ("rain", None), ("five silver coins", None)],
)
def test_parse_number_reads_a_value_that_is_one_number(value: str, expected: tuple | None) -> None:
    assert parse_number(value) == expected
