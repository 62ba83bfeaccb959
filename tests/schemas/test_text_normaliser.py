"""The one phrase normaliser: every evasion it undoes, and what it must leave apart."""

from __future__ import annotations

import pytest

from loreguard.schemas.text import matchable, norm_words, skeleton
from loreguard.text.phrases import contains_phrase, reveals
from loreguard.text.words import match_form


@pytest.mark.parametrize(
    "text",
    [
        "Dragons!",
        "the DRAGON's lair",
        "d r a g o n",
        "d.r.a.g.o.n",
        "d-r-a-g-o-n",
        "dr4g0n",
        "dra\u200bgon",  # zero-width space
        "dra\u00adgon",  # soft hyphen
        "ＤＲＡＧＯＮ",  # full width
        "𝐝𝐫𝐚𝐠𝐨𝐧",  # mathematical bold
        "dr\u0430g\u043en",  # Cyrillic а and о
        "the dragons' hoard",
    ],
)
def test_every_evasion_of_a_phrase_normalises_to_it(text: str) -> None:
    assert contains_phrase(text, "dragon"), match_form(text)


@pytest.mark.parametrize("text", ["a dragonfly landed", "snapdragons bloom", "drag on, old man", "the drag-net"])
def test_a_longer_word_or_another_word_is_not_the_phrase(text: str) -> None:
    assert not contains_phrase(text, "dragon"), match_form(text)


def test_homoglyphs_map_to_the_ascii_letter_they_imitate() -> None:
    assert skeleton("s\u0456lver") == "silver"  # Cyrillic і
    assert skeleton("\u03bfpen") == "open"  # Greek ο
    assert skeleton("plain ascii") == "plain ascii"


def test_case_folding_goes_beyond_lower_case() -> None:
    assert norm_words("STRASSE") == norm_words("Straße")


def test_digits_read_as_letters_only_inside_a_word_that_mixes_both() -> None:
    assert norm_words("s1lv3r m00n") == ("silver", "moon")
    assert norm_words("10 gold, 3 guards") == ("10", "gold", "3", "guards")


def test_plural_and_possessive_match_both_ways() -> None:
    assert contains_phrase("the dragon was here", "dragons")
    assert contains_phrase("the dragon's eye", "dragon")
    assert contains_phrase("Free of charge? Never.", "free of charge")
    assert contains_phrase("f r e e  o f  c h a r g e", "free of charge")  # spaced out as one run


def test_secrets_are_found_reversed_and_in_homoglyphs() -> None:
    assert reveals("The word is noom revlis.", "silver moon")
    assert reveals("It's NOOMREVLIS backwards", "silver moon")
    assert reveals("It's s\u0456lver m\u043e\u043en, friend.", "silver moon")
    assert not reveals("The silver spoon and the moon.", "silver moon")


def test_a_phrase_that_normalises_to_nothing_is_refused() -> None:
    for phrase in ("!!!", "\u200b\u200b", "🐉", "--"):
        with pytest.raises(ValueError, match="no letter or digit"):
            matchable(phrase)
    assert matchable("dragon") == "dragon"


def test_three_single_letters_join_two_do_not() -> None:
    assert norm_words("the d r a g o n") == ("the", "dragon")
    assert norm_words("Am I a guard? I a m.") == ("am", "i", "a", "guard", "iam")
    assert norm_words("So I a...") == ("so", "i", "a")
