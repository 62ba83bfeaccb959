"""Text folding and word splitting: one definition for retrieval, task classification and the gate.

Every script folds the same way (NFKD, accents dropped, lower case), so "Ключ", "CAFÉ" and
full-width "ＫＥＹ" compare equal to their plain forms, and no check can fold differently from
another. Scripts written without spaces (Chinese, Japanese kana and kanji) have no words to split
on; their runs are cut into overlapping two-character pieces, the usual stand-in for a word
segmenter, plus each Han character alone (one kanji is often a word), so "鍵を探している"
still shares keys with "鍵はどこ". Pure and deterministic.

`fold`, `words` and `stem` are defined in `loreguard.schemas.text` (so a schema can refuse a phrase
that normalises to nothing, and the gate's normaliser stems as retrieval does) and re-exported
here. `stem` is the one simple inflection every word match that
wants it shares (retrieval and task classification, the numbers a gate reads): a plural and its
singular ("quests", "quest") are one word.
"""

from __future__ import annotations

import re
from functools import lru_cache

from loreguard.schemas.text import fold, stem, words

__all__ = ["STOPWORDS", "fold", "is_unspaced", "keywords", "stem", "word_tokens", "words"]

#: A run of letters or digits in any script (underscore is a separator, as punctuation is).
_WORD = re.compile(r"[^\W_]+")
#: Han ideographs, hiragana, katakana (and the prolonged-sound mark): no spaces between words.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


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


#: Words too common to signal relevance.
STOPWORDS = frozenset(
    """a about after again all am an and any are as at be been but by can could did do does for
    from had has have he her here him his how i if in into is it its just me my no not now of on
    or our out over she so some than that the their them then there these they this to too up us
    was we were what when where which who why will with would you your yours""".split()
)


@lru_cache(maxsize=8192)
def keywords(text: str) -> frozenset[str]:
    """Folded content words of `text` in any script, each as its `stem` (so "quests" and "quest"
    are one keyword): stopwords out, and 1-2 letter words out except the two-character pieces of
    unspaced scripts (Chinese, Japanese)."""
    return frozenset(stem(w) for w in word_tokens(text) if (len(w) > 2 or is_unspaced(w)) and w not in STOPWORDS)
