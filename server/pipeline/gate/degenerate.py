"""Degenerate output: text no player should see, whatever the rules say. Pure and deterministic.

A small model under sampling can fall into a loop ("The password is: The password is: ..."),
stop with a bracket or quote left open by a cut-off thought, stop in the middle of a word, write
its own chat-template tokens (`<|im_start|>system`), or say nothing at all. Each is a hard
failure of the gate's hard limits (retried with a repair, then the fallback), with a rule id and
a reason that names what was found:

- `repetition_loop`: a span of `loop_span_words` or more words said twice in a row;
- `repeated_ngram`: a run of `ngram_words` words said more than `max_ngram_repeats` times;
- `repeated_words`: more than `max_repeated_word_ratio` of a long reply's words repeat earlier ones;
- `unbalanced_brackets`: a bracket or quote closed without being opened, or left open;
- `ends_mid_word`: no end punctuation, and the last word is cut off (a word of one or two
  letters that is no English word, letters with no vowel, or a contraction that needs a verb
  after it: "the ga", "str", "I'll");
- `special_token`: one of the loaded model's special tokens (the backend lists them) or the
  profile's `special_tokens`;
- `empty_dialogue`: no letter or digit at all.

Words are compared in the one normaliser's form (`loreguard.schemas.text.norm_words`).

Every check also runs on a dialogue prefix (`partial=True`, for streaming): what only the end of
a reply can decide (a bracket still open, the last word, emptiness) is then not judged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from loreguard.schemas.npc import OutputLimits
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import norm_words

LOOP_RULE = "repetition_loop"
NGRAM_RULE = "repeated_ngram"
WORD_RATIO_RULE = "repeated_words"
BRACKETS_RULE = "unbalanced_brackets"
MID_WORD_RULE = "ends_mid_word"
SPECIAL_TOKEN_RULE = "special_token"
EMPTY_RULE = "empty_dialogue"

#: Opening bracket or quote -> its closing one. Straight double quotes pair with themselves;
#: the apostrophe is left out (contractions, possessives).
_PAIRS = {"(": ")", "[": "]", "{": "}", "\u201c": "\u201d", "\u00ab": "\u00bb", "\u300c": "\u300d"}
_CLOSERS = {close: open_ for open_, close in _PAIRS.items()}
_BRACKET_CHARS = frozenset({'"', *_PAIRS, *_CLOSERS})
#: End punctuation a complete line may stop on (closing brackets and quotes may follow it).
_ENDINGS = frozenset(".!?\u2026\u3002\uff01\uff1f~-\u2014")
_TRAILING = "\"')]}\u201d\u00bb\u300d\u2019 "
#: Words of one or two letters a line may end on without a full stop.
_SHORT_WORDS = frozenset(
    "a i o ah am an as at aw ay be by do eh go ha he hi hm if in is it me mm my no of oh ok on or ox so to uh "
    "um up us we ye yo".split()
)
_VOWELS = frozenset("aeiouy")
#: A contraction no line ends on: a word, an apostrophe, then will/would/have/are ("I'll", "we've").
_CUT_CONTRACTION = re.compile(r"^[A-Za-z]+['\u2019](?:ll|d|ve|re)$", re.IGNORECASE)
#: Longest evidence quoted back in a reason (and so in the repair message).
_EVIDENCE_CHARS = 80


def _failure(rule: str, reason: str, evidence: str | None = None) -> GateFailure:
    return GateFailure(
        gate=GateName.HARD_LIMITS,
        reason=reason,
        severity=Severity.HARD,
        rule_id=rule,
        evidence=evidence[:_EVIDENCE_CHARS] if evidence else None,
    )


#: Longest period a back-to-back loop is looked for with; a longer one said three times is
#: still a repeated n-gram.
_MAX_LOOP_SPAN = 16


def _loop(words: tuple[str, ...], min_span: int) -> str | None:
    """The shortest span of at least `min_span` words said twice in a row, or None: a run of
    `span` positions where each word equals the one `span` words later."""
    n = len(words)
    for span in range(min_span, min(_MAX_LOOP_SPAN, n // 2) + 1):
        run = 0
        for i in range(n - span):
            run = run + 1 if words[i] == words[i + span] else 0
            if run == span:
                return " ".join(words[i - span + 1 : i + 1])
    return None


def _repeated_ngram(words: tuple[str, ...], size: int, max_repeats: int) -> tuple[str, int] | None:
    """The most repeated n-gram said more than `max_repeats` times (ties: first said), or None."""
    grams = [words[i : i + size] for i in range(len(words) - size + 1)]
    if len(grams) <= max_repeats:
        return None
    counts = Counter(grams)
    if max(counts.values()) <= max_repeats:
        return None  # the usual case, known without ranking the n-grams
    best = max(grams, key=lambda g: counts[g])  # max keeps the first of equals: text order
    return (" ".join(best), counts[best]) if counts[best] > max_repeats else None


def _bracket_problem(text: str, partial: bool) -> str | None:
    """The first bracket or quote out of balance, described; None when all pair up."""
    if _BRACKET_CHARS.isdisjoint(text):
        return None  # nothing to pair up (most lines)
    stack: list[str] = []
    straight_open = False
    for ch in text:
        if ch == '"':
            straight_open = not straight_open
        elif ch in _PAIRS:
            stack.append(ch)
        elif ch in _CLOSERS:
            if not stack or stack[-1] != _CLOSERS[ch]:
                return f"{ch!r} closes nothing that is open"
            stack.pop()
    if partial:
        return None
    if stack:
        return f"{stack[-1]!r} is never closed"
    if straight_open:
        return "a '\"' is never closed"
    return None


def _cut_word(text: str) -> str | None:
    """The last word when the text stops in the middle of it, else None."""
    stripped = text.rstrip(_TRAILING)
    if not stripped or stripped[-1] in _ENDINGS or not stripped[-1].isalpha():
        return None
    last = stripped.split()[-1] if stripped.split() else ""
    if _CUT_CONTRACTION.search(last):
        return last  # "... by the gate. I'll": a pronoun and an auxiliary, then nothing
    word = "".join(ch for ch in last.casefold() if ch.isalpha())
    if not word or not word.isascii():
        return None  # other scripts have no vowels to judge by
    if len(word) <= 2 and word not in _SHORT_WORDS:
        return last
    if len(word) >= 3 and not _VOWELS.intersection(word):
        return last
    return None


def find_degenerate(
    dialogue: str,
    limits: OutputLimits,
    special_tokens: Iterable[str] = (),
    *,
    partial: bool = False,
    before_hygiene: str | None = None,
) -> list[GateFailure]:
    """Every degenerate-output failure of `dialogue` (see the module's docstring), in a fixed
    order. `special_tokens`: the loaded model's; the profile's are added. `before_hygiene`: the
    reply's words before output hygiene stripped or cut anything, where special tokens, loops
    and brackets are looked for: hygiene strips a template token as markup, cuts a looping
    fragment back to its last sentence and an open `[` as a marker, but a model that wrote them
    is broken, and what it salvages ("The price is") is not a line to speak. Whether the line
    ends mid-word or is empty is judged on `dialogue`, what would be spoken."""
    failures: list[GateFailure] = []
    raw = dialogue if before_hygiene is None else before_hygiene
    for token in sorted({*special_tokens, *limits.special_tokens}, key=lambda t: (-len(t), t)):
        if token.strip() and token in raw:
            # The token itself is never repeated to the model: a repair naming it would put it in
            # the prompt, where the tokenizer reads it as the control token it is.
            shown = " ".join(norm_words(token)) or "a control token"
            failures.append(_failure(SPECIAL_TOKEN_RULE, f"dialogue holds one of the model's special tokens ({shown})"))
            break
    if not norm_words(dialogue):
        if not partial:
            failures.append(_failure(EMPTY_RULE, "dialogue has no word in it (empty or punctuation only)"))
        return failures
    words = norm_words(raw)
    if limits.loop_span_words:
        loop = _loop(words, limits.loop_span_words)
        if loop is not None:
            failures.append(_failure(LOOP_RULE, f'dialogue loops: "{loop}" is said twice in a row', loop))
    if limits.max_ngram_repeats and not any(f.rule_id == LOOP_RULE for f in failures):
        repeated = _repeated_ngram(words, limits.ngram_words, limits.max_ngram_repeats)
        if repeated is not None:
            gram, count = repeated
            failures.append(_failure(NGRAM_RULE, f'dialogue repeats "{gram}" {count} times', gram))
    if limits.max_repeated_word_ratio < 1.0 and len(words) >= limits.min_words_for_ratio:
        ratio = 1.0 - len(set(words)) / len(words)
        if ratio > limits.max_repeated_word_ratio:
            failures.append(
                _failure(
                    WORD_RATIO_RULE,
                    f"{ratio:.0%} of the dialogue's words repeat earlier ones (limit {limits.max_repeated_word_ratio:.0%})",
                )
            )
    if limits.unbalanced_brackets:
        problem = _bracket_problem(raw, partial)
        if problem is not None:
            failures.append(_failure(BRACKETS_RULE, f"dialogue has unbalanced brackets or quotes: {problem}"))
    if limits.ends_mid_word and not partial:
        cut = _cut_word(dialogue)
        if cut is not None:
            failures.append(_failure(MID_WORD_RULE, f"dialogue stops in the middle of a word ({cut!r})", cut))
    return failures
