"""Text folding and word splitting: one definition for retrieval, task classification and the gate.

Every script folds the same way (NFKD, accents dropped, lower case), so "Ключ", "CAFÉ" and
full-width "ＫＥＹ" compare equal to their plain forms, and no check can fold differently from
another. Scripts written without spaces (Chinese, Japanese kana and kanji) have no words to split
on; their runs are cut into overlapping two-character pieces, the usual stand-in for a word
segmenter, plus each Han character alone (one kanji is often a word), so "鍵を探している"
still shares keys with "鍵はどこ". Pure and deterministic.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

#: A run of letters or digits in any script (underscore is a separator, as punctuation is).
_WORD = re.compile(r"[^\W_]+")
#: Letters and digits of every script count (Cyrillic, Greek, CJK), not only ASCII.
_NON_ALNUM = re.compile(r"[\W_]+")
#: Han ideographs, hiragana, katakana (and the prolonged-sound mark): no spaces between words.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


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


def _pieces(token: str) -> list[str]:
    """A token with no unspaced-script run is one word; such runs become two-character pieces."""
    if token.isascii() or not _UNSPACED.search(token):
        return [token]
    pieces: list[str] = []
    last = 0
    for run in _UNSPACED.finditer(token):
        if run.start() > last:
            pieces.append(token[last : run.start()])
        chars = run.group()
        pieces.extend([chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)])
        if len(chars) > 1:
            pieces.extend(ch for ch in chars if _HAN.match(ch))  # one kanji is often a word: 鍵, 門
        last = run.end()
    if last < len(token):
        pieces.append(token[last:])
    return pieces


@lru_cache(maxsize=8192)
def word_tokens(text: str) -> tuple[str, ...]:
    """Folded words of `text` in order; unspaced scripts as overlapping two-character pieces."""
    return tuple(piece for token in _WORD.findall(fold(text)) for piece in _pieces(token))


def is_unspaced(word: str) -> bool:
    """True for a piece of an unspaced script: a keyword although it has only one or two characters."""
    return _UNSPACED.fullmatch(word) is not None
