"""Text normalisation for matching phrases, secrets and claims. Pure and deterministic.

Folding and word splitting are `loreguard.memory.text.fold` and `words`, shared with retrieval
and the claim checker, so the gate and the keywords that pick memories can never fold
differently."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from loreguard.memory.text import fold, words

_NON_ALPHA = re.compile(r"[\W\d_]+")
_SPACES = re.compile(r"\s+")

#: Common character swaps used to slip a word past a filter ("s1lv3r m00n").
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "|": "l", "!": "i"})

#: Squashed matching (spaces and punctuation removed) is used only for markers at least this
#: long: short ones would match inside unrelated words ("moon" in "honeymoon").
MIN_SQUASHED_MARKER = 6


# A pure function of its argument, called for the same secret markers on every interaction:
# memoised.
@lru_cache(maxsize=8192)
def squashed(text: str) -> str:
    """Folded, de-obfuscated letters only: 's-i-l-v-3-r  m00n' -> 'silvermoon'."""
    return _NON_ALPHA.sub("", fold(text).translate(_LEET))


def contains_phrase(haystack: str, phrase: str) -> bool:
    """Whole-word, case- and punctuation-insensitive containment."""
    needle = words(phrase)
    return bool(needle) and f" {needle} " in f" {words(haystack)} "


def reveals(haystack: str, marker: str) -> bool:
    """True when `marker` appears in `haystack`, even spaced out, punctuated or in leetspeak."""
    if contains_phrase(haystack, marker):
        return True
    needle = squashed(marker)
    return len(needle) >= MIN_SQUASHED_MARKER and needle in squashed(haystack)


def clean_dialogue(text: str) -> str:
    """NFC, control characters removed, whitespace collapsed: how dialogue is shown and stored."""
    text = unicodedata.normalize("NFC", text)
    text = "".join(ch if ch.isprintable() or ch in " \n\t" else " " for ch in text)
    return _SPACES.sub(" ", text).strip()
