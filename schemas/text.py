"""Folding and whole-word form of text: the one definition every check matches on.

It lives with the schemas, the lowest layer, so that a schema can refuse at registration a phrase
the gate could never match (one that folds to no word at all); `loreguard.memory.text` builds
word splitting for retrieval on it, and the gate matches with it (`server/pipeline/textnorm.py`).
Pure and deterministic.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

#: Letters and digits of every script count (Cyrillic, Greek, CJK), not only ASCII.
_NON_ALNUM = re.compile(r"[\W_]+")

#: Below this code point (Latin, Greek, Cyrillic) and in Latin Extended Additional, a combining
#: mark is an accent a player may or may not type ("café", "ёж"), so it is dropped. Elsewhere it
#: can change the word (Japanese dakuten: と and ど), so it stays.
_ACCENTED_SCRIPTS_END = 0x0530
_LATIN_EXTENDED_ADDITIONAL = range(0x1E00, 0x1F00)


@lru_cache(maxsize=8192)
def fold(text: str) -> str:
    """Lower case, accents removed, compatibility forms unified (full-width letters, ligatures)."""
    if text.isascii():
        return text.lower()
    kept: list[str] = []
    base = 0
    for ch in unicodedata.normalize("NFKD", text):
        if not unicodedata.combining(ch):
            base = ord(ch)
        elif base < _ACCENTED_SCRIPTS_END or base in _LATIN_EXTENDED_ADDITIONAL:
            continue
        kept.append(ch)
    return unicodedata.normalize("NFC", "".join(kept)).lower()


@lru_cache(maxsize=8192)
def words(text: str) -> str:
    """Folded text as single-space-separated words, for whole-phrase matching."""
    return _NON_ALNUM.sub(" ", fold(text)).strip()


def matchable(phrase: str) -> str:
    """A phrase a check matches on must keep a word once folded: one made only of punctuation,
    symbols or emoji folds to nothing, and the gate would keep a check that can never fire."""
    if not words(phrase):
        raise ValueError(f"{phrase!r} has no letter or digit, so no reply could ever match it; write it in words")
    return phrase
