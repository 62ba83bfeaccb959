"""The dialogue guard: the sampler refuses a token that would make the reply fail the gate's word checks.

A generation's output is the bounded JSON whose first property is `dialogue`
(`output_schema`), so the dialogue is known as it grows. Before a drawn token is taken, the
guard decodes the dialogue as it would read with that token and asks whether it now breaks one
of the attempt's `DialogueConstraints` (stated by the gate modules themselves; see
`loreguard.schemas.prevention`) that it did not break before:

- a banned phrase, found as the gate finds it (`contains_phrase`: case, punctuation, spacing and
  plurals do not hide it), or a banned pattern;
- a run of more than `CopyLimit.longest` words copied from a source, on the normalised words
  every phrase check compares (`norm_words`), each as its singular, unless every word of the
  run is a word of one free text (a canonical fact, the lore: "the gate closes at dusk" restates
  "The north gate closes at dusk.");
- a banned opening.

The last word counts as written: " with" completes "assist with" even if "without" might have
followed, so a phrase is refused on the token that completes it, whatever the tokenisation (one
token or several, a leading space or none); a token whose letters join the last word's is read
as a word of its own too, or "a" then "dragon" would write "adragon" (and a copied run "northern"
then "gate", "northerngate"). A pattern ending in `$` is matched only once the
dialogue is closed, or at a sentence end the pattern names.

The sampler then draws again without that token (`sampling._guarded`); what it refused is
counted per rule and evidence (`prevented`), for the attempt's receipt. When no allowed token is
left it lets the first one through: the gate, which still judges every reply, decides.

Everything is a function of the tokens and the constraints: the reproducible engine writes the
same line for the same request, and a replay is exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache

from loreguard.schemas.prevention import DialogueConstraints, Prevention
from loreguard.schemas.text import norm_words
from loreguard.text.phrases import contains_phrase
from loreguard.text.words import stem

#: The bounded JSON up to the dialogue string's first character.
_OPENING = re.compile(rb'\s*\{\s*"dialogue"\s*:\s*"')
#: The dialogue string's body so far (escapes kept whole) and its closing quote, if any.
_BODY = re.compile(rb'(?:[^"\\]|\\.)*(?:\\$)?')
#: An escape cut off at the end of the text so far: a backslash, or "\\u" and up to three hex
#: digits (it is one when the backslashes before it are even in number: "\\\\u00" is a backslash
#: then "u00").
_HALF_ESCAPE = re.compile(rb"\\(?:u[0-9a-fA-F]{0,3})?$")
#: What ends a probe of an open dialogue: no pattern's `$` matches before the dialogue ends.
_OPEN_END = "\x00"

Violation = tuple[str, str]  # (rule_id, evidence)
#: A half-written last word counts as the start of a refused word from this many letters on:
#: "dra" of "dragon", not "d", which starts too many words to refuse.
_PARTIAL_CHARS = 2


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


@lru_cache(maxsize=64)
def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern matching where any of `patterns` does; None when they cannot be joined (a
    designer's pattern with a global inline flag)."""
    if not patterns:
        return None
    try:
        return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
    except re.error:
        return None


def _words(text: str) -> tuple[str, ...]:
    """The words a copy is compared on: the normalised words, each as its singular ("lanterns"
    copies "lantern", as the gate's likeness of letters finds)."""
    return tuple(stem(word) for word in norm_words(text))


def _grams(words: tuple[str, ...], n: int) -> set[tuple[str, ...]]:
    return {words[i : i + n] for i in range(len(words) - n + 1)}


def _starts(words: tuple[str, ...], run: tuple[str, ...]) -> bool:
    """Whether `words`, its last one perhaps half written, may be the start of `run` as long."""
    return words[:-1] == run[:-1] and run[-1].startswith(words[-1])


class _Runs:
    """Runs of words the dialogue may not hold, by length, each with what it breaks. The last word
    of an open dialogue may be half written ("lanter" of "lanterns"): it counts when a refused
    run's last word starts with it, so the word is refused before it is cut off, not after."""

    def __init__(self) -> None:
        self._whole: dict[int, dict[tuple[str, ...], Violation]] = {}
        self._heads: dict[int, dict[tuple[str, ...], list[tuple[str, Violation]]]] = {}

    def add(self, run: tuple[str, ...], violation: Violation) -> None:
        if not run:
            return
        self._whole.setdefault(len(run), {}).setdefault(run, violation)
        self._heads.setdefault(len(run), {}).setdefault(run[:-1], []).append((run[-1], violation))

    def found(self, words: tuple[str, ...], partial: bool) -> set[Violation]:
        out: set[Violation] = set()
        for n, runs in self._whole.items():
            # only runs ending in the last few words can be new: one token adds a word or two
            for i in range(max(0, len(words) - n - _NEW_WORDS), len(words) - n + 1):
                if (violation := runs.get(words[i : i + n])) is not None:
                    out.add(violation)
            if partial and len(words) >= n and len(words[-1]) >= _PARTIAL_CHARS:
                last = words[-1]
                out.update(v for word, v in self._heads[n].get(words[len(words) - n : -1], ()) if word.startswith(last))
        return out


class DialogueGuard:
    """One generation's guard: what its dialogue may not say, and where the dialogue stands."""

    def __init__(self, constraints: DialogueConstraints, pieces: Sequence[bytes]) -> None:
        self._pieces = pieces
        self._raw = bytearray()
        self._closed = False
        self._phrases = [(b.rule_id, b.phrase) for b in constraints.banned if b.phrase]
        self._patterns = [(b.rule_id, b.pattern, _regex(b.pattern)) for b in constraints.banned if b.pattern]
        self._any_pattern = _any_of(tuple(source for _, source, _ in self._patterns))
        free = [frozenset(_words(text)) for text in constraints.free]
        #: Runs of words the dialogue may not hold: the copies' and the banned phrases' words.
        self._runs = _Runs()
        for rule, phrase in self._phrases:
            self._runs.add(_words(phrase), (rule, phrase))
        for limit in constraints.copies:
            n = limit.longest + 1
            for gram in sorted(_grams(_words(limit.source), n)):
                if not any(words.issuperset(gram) for words in free):
                    self._runs.add(gram, (limit.rule_id, " ".join(gram)))
        self._openings = [(o.rule_id, _words(o.words)) for o in constraints.openings if o.words.strip()]
        #: What the dialogue taken so far breaks (let through when nothing else was allowed).
        self._found: frozenset[Violation] = frozenset()
        #: Where the dialogue's last sentence begins (at the mark that ends the one before): a new
        #: pattern match starts there or later.
        self._sentence_at = 0
        self._probe: tuple[int, frozenset[Violation], bool, int] | None = None
        self._refused: dict[Violation, int] = {}

    def observe(self, token: int) -> None:
        """`token` was taken (sampled or forced)."""
        probe = self._probe if self._probe is not None and self._probe[0] == token else (token, *self._violations(token))
        self._raw += self._pieces[token]
        self._found, self._closed, self._sentence_at, self._probe = probe[1], probe[2], probe[3], None

    def refuses(self, token: int) -> Violation | None:
        """What taking `token` would newly break, or None."""
        if self._closed:
            return None
        self._probe = (token, *self._violations(token))
        new = self._probe[1] - self._found
        return min(new) if new else None

    def count(self, violation: Violation) -> None:
        """A drawn token was refused for `violation`."""
        self._refused[violation] = self._refused.get(violation, 0) + 1

    def prevented(self) -> tuple[Prevention, ...]:
        """What was refused, per rule and evidence, in a fixed order."""
        return tuple(
            Prevention(rule_id=rule, evidence=evidence, refused=n) for (rule, evidence), n in sorted(self._refused.items())
        )

    def _glued(self, token: int) -> str | None:
        """The dialogue's tail with a space between it and `token` when the token's letters would
        join the last word's: refused " dragon", the 1.5B wrote "a" then "dragon", and the player
        read "adragon". None when they would not join."""
        piece = self._pieces[token]
        if not (piece[:1].isalpha() and self._raw[-1:].isalpha()):
            return None
        decoded = _dialogue(bytes(self._raw + b" " + piece))
        return _tail(decoded[0]) if decoded is not None else None

    def _violations(self, token: int) -> tuple[frozenset[Violation], bool, int]:
        """What the dialogue would break with `token` taken, whether it would be closed, and
        where its last sentence would begin."""
        if self._closed:
            return self._found, True, self._sentence_at
        decoded = _dialogue(bytes(self._raw + self._pieces[token]))
        if decoded is None:
            return frozenset(), False, 0
        text, closed = decoded
        # Only what ends in the new text can be new: the checks read its tail, from a word's start
        # (the dialogue before it was checked token by token already).
        tail = _tail(text)
        found: set[Violation] = set()
        glued = self._glued(token)
        for rule, phrase in self._phrases:
            if contains_phrase(tail, phrase) or (glued is not None and contains_phrase(glued, phrase)):
                found.add((rule, phrase))
        probe = (text if closed else text + _OPEN_END).replace("\u2019", "'")
        start = len(text) - len(tail)
        at = max(start, min(self._sentence_at, len(text)))
        if self._any_pattern is None or self._any_pattern.search(probe, at):  # most tokens: one search
            for rule, source, regex in self._patterns:
                if regex.search(probe, at):  # `^` still means the dialogue's start
                    found.add((rule, source))
        # a text ending in a letter may be ending in half a word: a start of the banned word counts
        partial = not closed and bool(text) and text[-1].isalnum()
        found |= self._runs.found(_words(tail), partial)
        if glued is not None:
            found |= self._runs.found(_words(glued), partial)  # "northern" then "gate": "northerngate"
        if self._openings and start == 0:
            words = _words(text)
            for rule, opening in self._openings:
                head = words[: len(opening)]
                if head == opening or (
                    partial and len(head) == len(opening) and len(head[-1]) >= _PARTIAL_CHARS and _starts(head, opening)
                ):
                    found.add((rule, " ".join(opening)))
        return frozenset(found), closed, _last_sentence(text)


#: The words at the dialogue's end a new run may end in (one token adds a word or two).
_NEW_WORDS = 4
#: What ends a sentence, for where the last one begins.
_SENTENCE_MARK = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s")


def _last_sentence(text: str) -> int:
    """Where the last sentence of `text` begins: at the mark that ends the one before (a pattern
    may begin there: "[.!?] You're Brom"), or 0."""
    start = 0
    for match in _SENTENCE_MARK.finditer(text):
        start = match.start()
    return start


#: How much of the dialogue's end the checks read: longer than any banned run or pattern match
#: (a persona recital of nine words, an assistant's sentence), far shorter than a long line.
TAIL_CHARS = 240


def _tail(text: str) -> str:
    """The last `TAIL_CHARS` of `text` or so, from the start of a word (a word cut in half at the
    window's edge could read as another: "snapdragon")."""
    if len(text) <= TAIL_CHARS:
        return text
    cut = text.find(" ", len(text) - TAIL_CHARS)
    return text[cut + 1 :] if cut >= 0 else text[-TAIL_CHARS:]


def _dialogue(raw: bytes) -> tuple[str, bool] | None:
    """The dialogue decoded from a growing JSON output, and whether its string is closed; None
    before it starts (or when the output does not start with it)."""
    opening = _OPENING.match(raw)
    if opening is None:
        return None
    body = _BODY.match(raw, opening.end())
    assert body is not None  # the pattern matches the empty string
    closed = body.end() < len(raw) and raw[body.end() : body.end() + 1] == b'"'
    content = body.group(0)
    half = _HALF_ESCAPE.search(content)
    if half is not None and (len(content[: half.start()]) - len(content[: half.start()].rstrip(b"\\"))) % 2 == 0:
        content = content[: half.start()]  # an escape cut in half ("\\", "\\u00"): the rest is yet to come
    try:
        return json.loads('"' + content.decode("utf-8", "ignore") + '"'), closed
    except json.JSONDecodeError:
        return None  # not the JSON string the grammar writes
