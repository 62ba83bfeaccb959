"""Folding and the matching form of text: the one normaliser every phrase check matches on.

It lives with the schemas, the lowest layer, so that a schema can refuse at registration a phrase
the gate could never match (one that normalises to no word at all). Word splitting for retrieval
and task classification is here too (`word_tokens`, `keywords`): every script folds the same way,
and scripts written without spaces (Chinese, Japanese) are cut into overlapping two-character
pieces plus each Han character alone, the usual stand-in for a word segmenter, so "鍵を探している"
still shares keys with "鍵はどこ". Every phrase check of the gate (forbidden and required
phrases, secret markers, claims and their cues) matches on `norm_words` / `match_form`, through
`text/phrases.py` and `loreguard.memory.claims`, so no two checks can normalise
differently. Pure and deterministic.

`norm_words` goes further than `fold`, against text written to slip past a filter:
1. zero-width and other format characters (Unicode category Cf) are removed ("dra\u200bgon");
2. NFKD with accents dropped (`fold`), then case folding (ß -> ss);
3. each character is replaced by its Unicode TR39 confusable prototype when that is one ASCII
   letter or digit (Cyrillic і -> i, Greek ο -> o, math bold 𝐚 -> a): `skeleton`;
4. in a word mixing letters and digits, digits read as the letters they stand for ("dr4g0n");
5. a run of three or more single letters is one word ("d r a g o n", "d.r.a.g.o.n" -> dragon);
`match_form` then drops a lone "s" after a word (the possessive "dragon's") and takes each
word's singular (`stem`), so `dragon` matches "Dragons" and "dragon's" but never "dragonfly".
(The claim checker keeps the "s": "the gate's open" is a claim, `'s` its cue.)
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


_CONFUSABLES_PACKAGE = "confusable_homoglyphs"


@lru_cache(maxsize=1)
def _skeleton_table() -> dict[int, str]:
    """Non-ASCII character -> the one lower-case ASCII letter or digit TR39 says it is confused
    with. Built once from the confusables data `confusable-homoglyphs` ships (Unicode's
    confusables.txt as JSON); a character confusable with several ASCII ones is left alone
    (none is in the current data, but a later one must not make the table depend on order)."""
    import json
    from importlib.resources import files

    data = json.loads(files(_CONFUSABLES_PACKAGE).joinpath("confusables.json").read_text(encoding="utf-8"))
    table: dict[int, str] = {}
    for char, homoglyphs in sorted(data.items()):
        if len(char) != 1 or char.isascii():
            continue
        targets = {h["c"].lower() for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalnum()}
        if len(targets) == 1:
            table[ord(char)] = targets.pop()
    return table


def skeleton(text: str) -> str:
    """`text` with every character confusable with one ASCII letter or digit replaced by it."""
    return text if text.isascii() else text.translate(_skeleton_table())


#: Digits read as letters inside a word that mixes both ("s1lv3r", "dr4g0n").
_LEET_DIGITS = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t"})
_WORD_RUN = re.compile(r"[^\W_]+")
#: Fewest single letters in a row read as one spaced-out word ("d r a g o n"); two would join
#: ordinary pairs ("I a..."), three in a row almost never occur in real dialogue.
MIN_SPACED_LETTERS = 3


def _without_format(text: str) -> str:
    if text.isascii():
        return text
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


@lru_cache(maxsize=16384)
def _tokens(text: str) -> tuple[str, ...]:
    """Steps 1-4 of the module's docstring: the words before spaced-out letters are joined."""
    folded = skeleton(fold(_without_format(text)).casefold())
    tokens = []
    for token in _WORD_RUN.findall(folded):
        if not token.isalpha() and not token.isdigit() and token.isascii():
            token = token.translate(_LEET_DIGITS)
        tokens.append(token)
    return tuple(tokens)


def _letter_runs(tokens: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of every run of at least `MIN_SPACED_LETTERS` single letters."""
    runs = []
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and len(tokens[j]) == 1 and tokens[j].isalpha():
            j += 1
        if j - i >= MIN_SPACED_LETTERS:
            runs.append((i, j))
        i = max(j, i + 1)
    return runs


@lru_cache(maxsize=16384)
def norm_words(text: str) -> tuple[str, ...]:
    """The words of `text` as every phrase check compares them (see the module's docstring),
    not yet stemmed."""
    tokens = _tokens(text)
    out: list[str] = []
    last = 0
    for start, end in _letter_runs(tokens):
        out.extend(tokens[last:start])
        out.append("".join(tokens[start:end]))
        last = end
    out.extend(tokens[last:])
    return tuple(out)


@lru_cache(maxsize=4096)
def spelled_out(text: str) -> tuple[str, ...]:
    """Each run of single letters in `text` joined ("it's a d r a g o n" -> "sadragon"): a spaced-out
    word has no word boundary left, so a phrase is looked for anywhere inside such a run."""
    tokens = _tokens(text)
    return tuple("".join(tokens[start:end]) for start, end in _letter_runs(tokens))


@lru_cache(maxsize=8192)
def words(text: str) -> str:
    """Folded text as single-space-separated words, for whole-phrase matching."""
    return _NON_ALNUM.sub(" ", fold(text)).strip()


def matchable(phrase: str) -> str:
    """A phrase a check matches on must keep a word once normalised: one made only of
    punctuation, symbols, emoji or invisible characters normalises to nothing, and the gate would
    keep a check that can never fire."""
    if not norm_words(phrase):
        raise ValueError(f"{phrase!r} has no letter or digit, so no reply could ever match it; write it in words")
    return phrase
