"""Phrase matching for the gate: forbidden and required phrases, secret markers. Pure and
deterministic.

Every comparison goes through the one normaliser, `loreguard.schemas.text.match_form` (format
characters, NFKC-style folding, case folding, TR39 confusables skeleton, letter-spacing, leet
digits, possessives and plurals; see that module), which the claim checker and the registration
checks use too, so no two checks can normalise differently. Secrets are matched harder than
designer phrases (`reveals`: also with spaces and punctuation squashed out, and reversed)."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from loreguard.schemas.text import norm_words, skeleton, spelled_out
from loreguard.text.words import match_form

#: Words with which an NPC addresses the one it talks to ("Move along, traveller."): they say
#: nothing of what a line is about (a greeting may end on one; two lines alike only in them and
#: their small words say different things).
VOCATIVES = ("traveller", "traveler", "stranger", "friend", "love", "dear", "sir", "madam", "lad", "lass")

_NON_ALPHA = re.compile(r"[\W\d_]+")
_SPACES = re.compile(r"\s+")
#: Han ideographs, hiragana, katakana: a phrase in these scripts has no spaces to match on.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

#: Common character swaps used to slip a word past a filter ("s1lv3r m00n"); for secrets, every
#: digit of the text is read this way (a designer phrase reads digits as letters only inside a
#: word that mixes both, so "10 gold" stays a number).
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "|": "l", "!": "i"})

#: Squashed matching (spaces and punctuation removed) is used only for markers at least this
#: long: short ones would match inside unrelated words ("moon" in "honeymoon").
MIN_SQUASHED_MARKER = 6
#: Shortest phrase looked for inside a spelled-out run: a shorter one ("ale") would turn up in
#: the letters of an unrelated word.
MIN_SPELLED_PHRASE = 4


# A pure function of its argument, called for the same secret markers on every interaction:
# memoised.
@lru_cache(maxsize=8192)
def squashed(text: str) -> str:
    """Normalised, de-obfuscated letters only: 's-i-l-v-3-r  m00n' -> 'silvermoon'."""
    return _NON_ALPHA.sub("", skeleton(" ".join(norm_words(text.translate(_LEET)))))


@lru_cache(maxsize=4096)
def _needles(phrase: str) -> tuple[str, str, bool, str, str | None]:
    """The phrase's match form, that form with its spaces removed (a spaced-out phrase reads as
    one word), whether it is in an unspaced script, and the two as whole words (space-padded;
    the second None when it is the first)."""
    needle = match_form(phrase)
    joined = needle.replace(" ", "")
    return needle, joined, bool(_UNSPACED.search(needle)), f" {needle} ", f" {joined} " if joined != needle else None


@lru_cache(maxsize=16384)
def _padded(haystack: str) -> str:
    return f" {match_form(haystack)} "


def contains_phrase(haystack: str, phrase: str) -> bool:
    """Whole-phrase containment on the normalised form: case, punctuation, homoglyphs, spacing
    and plurals do not hide a phrase; a longer word (`dragonfly`) does not contain it."""
    needle, joined, unspaced, whole, whole_joined = _needles(phrase)
    if not needle:
        return False
    if unspaced:
        return joined in match_form(haystack).replace(" ", "")
    padded = _padded(haystack)
    if whole in padded or (whole_joined is not None and whole_joined in padded):
        return True
    # spelled out, the phrase may stand anywhere in a run of letters ("it's a d r a g o n")
    if len(joined) < MIN_SPELLED_PHRASE:
        return False
    runs = spelled_out(haystack)
    return bool(runs) and any(joined in run for run in runs)


def reveals(haystack: str, marker: str) -> bool:
    """True when `marker` appears in `haystack`, even spaced out, punctuated, in leetspeak, in
    look-alike letters or written backwards."""
    if contains_phrase(haystack, marker) or contains_phrase(haystack, marker[::-1]):
        return True
    needle = squashed(marker)
    if len(needle) < MIN_SQUASHED_MARKER:
        return False
    hay = squashed(haystack)
    return needle in hay or needle[::-1] in hay


#: A sentence: up to and with its end marks, or up to a line break or the end of the text.
_SENTENCE = re.compile(r"[^.!?\u2026\n]+[.!?\u2026]*")


def sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped, in order: what the self-repeat and instruction checks
    compare one at a time."""
    return [s for s in (m.group(0).strip() for m in _SENTENCE.finditer(text)) if s]


def clean_dialogue(text: str) -> str:
    """NFC, control characters replaced by spaces, invisible format characters (zero-width
    spaces and joiners, soft hyphens, direction marks) removed, whitespace collapsed: how dialogue
    is shown and stored. Removed, not spaced, so "dra\u200bgon" is the word it looks like."""
    text = unicodedata.normalize("NFC", text)
    if not text.isprintable():  # else every character stays as it is (the usual line)
        text = "".join(
            ch if ch.isprintable() or ch in " \n\t" else ("" if unicodedata.category(ch) == "Cf" else " ") for ch in text
        )
    return _SPACES.sub(" ", text).strip()
