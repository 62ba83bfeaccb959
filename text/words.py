"""Words, stems and keywords: how every check, memory's claim reading and request reading split
text into words and bring a word to its base form.

Words are folded first (`loreguard.schemas.text.fold`: lower case, accents off), so every
script splits the same way, and scripts written without spaces (Chinese, Japanese) are cut into
overlapping two-character pieces plus each Han character alone, the usual stand-in for a word
segmenter, so "鍵を探している" still shares keys with "鍵はどこ". The one stemmer (`stem`) undoes a
plural `s`, which is what both sides of every match agree on; `verb_forms` lists the bases an
inflected verb may come from, for the lists that name verbs (stage directions). Pure.
"""

from __future__ import annotations

import re
from functools import lru_cache

from loreguard.schemas.text import fold, norm_words


@lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """A folded word's singular, roughly and consistently: quests -> quest, pennies -> penny,
    boxes -> box, glasses -> glass, horses -> horse. Only a plural ending in `s` is undone (English,
    and the plural of most Spanish and French words: puertas, portes), so both sides of a match
    must be stemmed; other inflections (German Tore, Russian ворот) are left as they are."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "ches", "shes", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
        return word[:-1]
    return word


@lru_cache(maxsize=4096)  # the same phrases and sentences, turn after turn
def stems(text: str) -> tuple[str, ...]:
    """The words of `text` (`word_tokens`), each as its `stem`."""
    return tuple(stem(word) for word in word_tokens(text))


def verb_forms(word: str) -> list[str]:
    """`word` and the bases it may be an inflection of, most likely first: laughs, laughing,
    laughed -> laugh; cries, cried -> cry; grinning -> grin; smiled -> smile."""
    candidates = [word]
    if word.endswith("ies") or word.endswith("ied"):
        candidates.append(word[:-3] + "y")
    for suffix in ("ing", "ed", "es", "s", "d"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            base = word[: -len(suffix)]
            candidates += [base, base + "e"]
            if len(base) > 2 and base[-1] == base[-2]:
                candidates.append(base[:-1])  # grinning -> grin, sobbed -> sob
    return candidates


@lru_cache(maxsize=16384)
def match_form(text: str) -> str:
    """`norm_words` of `text` without possessive "s", each word singular, joined by single
    spaces: the form whole-phrase matching compares (`" dragon " in " the dragon lair "`)."""
    tokens = norm_words(text)
    return " ".join(stem(word) for i, word in enumerate(tokens) if not (word == "s" and i > 0))


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


def contains_run(words: tuple[str, ...], run: tuple[str, ...]) -> bool:
    """Whether `run` stands in `words` as a contiguous run (both stemmed, as `stems` gives them)."""
    n = len(run)
    return bool(n) and any(words[i : i + n] == run for i in range(len(words) - n + 1))


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
