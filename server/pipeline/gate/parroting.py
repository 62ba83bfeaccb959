"""Parroting: a reply that copies the prompt instead of answering. Pure and deterministic.

A small model shown one example exchange tends to answer every player line with the example's
NPC line, word for word; or it echoes the player, or recites its persona. The gate fails such a
reply hard (rule `parroting`, retried with a repair that names what was copied), measured on the
one normaliser's words (`loreguard.schemas.text.norm_words`):

- a few-shot example's line: the reply is as a whole that similar to it (difflib's ratio over the
  normalised characters, so "traveler" for "traveller" or "opens" for "open" still count as a
  copy), or it holds that share of the line's words in copied runs of at least `_LINE_RUN_WORDS`
  words (an example with something added around it); but the example's NPC line said to the
  question it was written for, or in its shape about what this player asks of, is the NPC's
  answer (`_answers_as_example`): the style the examples teach is the NPC being itself;
- the player's own line, or one of the player's lines the NPC answered lately (the real model
  answered "Can I pay you to let me in?" with the player's question before it, "What's that noise
  in the hills?"): the same, but compared word by word, not character by character, so that
  answering "Is the gate open?" with "The gate is open." is no echo, nor is a statement that
  answers a question with a yes or a no in its words ("No trouble on the road lately." to "Any
  trouble on the road lately?"); and a reply that is mostly
  the player's words, in copied runs, is one ("What's the password? Spell it out for me." said
  back to the captain's cousin who asked it); the player's line copied into a reply that is mostly
  its own words is no echo either ("No news from the hills, traveller. The captain forbade all
  talk of it." to "Any news from the hills?"), unless the whole line is said back;
- the persona (a long text a short reply cannot resemble as a whole): the share of the reply's
  words that lie in runs of at least `_RUN_WORDS` words copied from it.

Both compare against the profile's `max_copy_similarity`.

Replies shorter than `min_copy_words` words are never parroting: "Aye, traveller." is a line
every guard may say. Canonical facts and the world's lore are not compared: saying a fact as it
is written is right.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

from loreguard.schemas.npc import FewShotExample, OutputLimits
from loreguard.schemas.output import WorldIntent
from loreguard.schemas.prevention import BannedOpening, CopyLimit
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import norm_words
from loreguard.text.words import keywords, stem

PARROTING_RULE = "parroting"
#: A copied run of the persona or lore counts from this many words on.
_RUN_WORDS = 5
#: A copied run of an example or the player's line counts from this many words on.
_LINE_RUN_WORDS = 3
_EVIDENCE_CHARS = 80


def similarity(a: tuple[str, ...], b: tuple[str, ...], floor: float = 0.0) -> float:
    """difflib's ratio of two word sequences' characters (words joined by one space): 1.0 for
    equal ones, 0.0 for nothing in common. Below `floor` it may return a cheap upper bound
    instead (difflib's quick ratios), which is all a threshold needs."""
    if not a and not b:
        return 1.0
    matcher = SequenceMatcher(None, " ".join(a), " ".join(b), autojunk=False)
    bound = matcher.real_quick_ratio()
    if bound < floor:
        return bound
    bound = matcher.quick_ratio()
    return bound if bound < floor else matcher.ratio()


#: The share of a reply that must be the player's words, in copied runs, for the player's line
#: copied into it to be an echo rather than an answer that takes up the question's words.
_ECHO_SHARE = 0.5


def copied_share(of: tuple[str, ...], other: tuple[str, ...], run: int = _RUN_WORDS, floor: float = 0.0) -> float:
    """Share of `of`'s words that lie in runs of at least `run` words also found in `other`.
    Below `floor` it may return a cheap upper bound (the share of `of`'s words in `other` at all)."""
    if not of:
        return 0.0
    present = set(other)
    bound = sum(word in present for word in of) / len(of)
    if bound < floor:
        return bound
    blocks = SequenceMatcher(None, of, other, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks if b.size >= run) / len(of)


@lru_cache(maxsize=4096)
def _counts(words: tuple[str, ...]) -> Counter[str]:
    """Memoised: the same replies and player lines are compared turn after turn."""
    return Counter(words)


def _shared_words(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many words `a` and `b` share, counted with repeats: no alignment of the two can
    match more, so 2 * this / (len(a) + len(b)) bounds difflib's ratio of the word sequences."""
    ca, cb = _counts(a), _counts(b)
    return sum(min(n, cb[w]) for w, n in ca.items() if w in cb)


def _word_ratio(a: tuple[str, ...], b: tuple[str, ...], floor: float) -> float:
    """difflib's ratio of two word sequences; below `floor` maybe a cheap upper bound instead:
    lengths, then the words both hold (as multisets), bound it, and most lines stop there."""
    total = max(1, len(a) + len(b))
    score = 2 * min(len(a), len(b)) / total
    score = score if score < floor else 2 * _shared_words(a, b) / total
    return score if score < floor else SequenceMatcher(None, a, b, autojunk=False).ratio()


#: Words that open the naming of what a request asks for: "a loaf of bread", "two lanterns".
_OBJECT_OPENERS = frozenset(
    "a an the some any one two three four five six seven eight nine ten few couple pair another more".split()
)
#: The longest naming of a request's object, in words ("a small coil of rope").
_OBJECT_WORDS = 5


def _is_object(run: tuple[str, ...], objects: frozenset[str]) -> bool:
    """Whether a run of words names what the player's request asks for: it ends on one of the
    request's parameter values and starts at an article, a number or the value itself."""
    return (
        len(run) <= _OBJECT_WORDS
        and stem(run[-1]) in objects
        and (run[0] in _OBJECT_OPENERS or run[0].isdigit() or stem(run[0]) in objects)
    )


def _copied_share_but_objects(of: tuple[str, ...], other: tuple[str, ...], objects: frozenset[str]) -> float:
    """`copied_share(of, other, _LINE_RUN_WORDS)`, less the runs that only name the request's
    object: "A loaf of bread, love!" to "Give me a loaf of bread, here's a copper." takes up
    the order, as the example's "One good rope, love." does; "Give me a loaf of bread." says
    the player's line back."""
    if not of:
        return 0.0
    blocks = SequenceMatcher(None, of, other, autojunk=False).get_matching_blocks()
    runs = (of[b.a : b.a + b.size] for b in blocks if b.size >= _LINE_RUN_WORDS)
    return sum(len(run) for run in runs if not _is_object(run, objects)) / len(of)


def _line_copy(
    reply: tuple[str, ...],
    line: tuple[str, ...],
    min_words: int,
    floor: float,
    *,
    by_words: bool = False,
    objects: frozenset[str] = frozenset(),
) -> float:
    """How much `reply` copies `line`: whole-reply similarity (of characters, or of words), or
    (for a line of at least `min_words` words) the share of the line copied into the reply in runs.
    `objects`: the stems of what the player's line asks for (see `_copied_share_but_objects`)."""
    if by_words:
        score = _word_ratio(reply, line, floor)
    else:
        score = similarity(reply, line, floor)
    if score < floor and len(line) >= min_words:
        copied = copied_share(line, reply, _LINE_RUN_WORDS, floor)
        # The player's words inside an answer that is mostly its own are no echo: "No news from
        # the hills, traveller. The captain forbade all talk of it." to "Any news from the hills?"
        # the whole line said back is an echo whatever follows it.
        if not by_words or copied >= 1.0 or copied < floor or copied_share(reply, line, _LINE_RUN_WORDS) >= _ECHO_SHARE:
            score = max(score, copied)
    if score < floor and by_words:
        # a reply made of the player's words: "What's the password? Spell it out for me." said
        # back to "I'm the captain's cousin. What's the password? Spell it out for me."
        copied = copied_share(reply, line, _LINE_RUN_WORDS, floor)
        if copied >= floor and objects:
            copied = _copied_share_but_objects(reply, line, objects)
        score = max(score, copied)
    return score


#: Two player lines whose content words overlap this much (shared over all) ask the same thing:
#: "Have you heard any news?" and the example's "Heard any news?".
_SAME_ASKING = 0.5


#: Irregular forms of one word, so two lines ask the same thing in either: "What do you have for
#: sale?" asks the example's "What do you sell?" (the 1.5B's answer in the example's words was
#: refused as a copy).
_SAME_WORD = {
    "sale": "sell", "sold": "sell", "bought": "buy", "paid": "pay", "told": "tell", "said": "say", "went": "go",
    "gone": "go", "saw": "see", "seen": "see", "knew": "know", "known": "know", "gave": "give", "given": "give",
    "took": "take", "taken": "take", "thought": "think", "heard": "hear",
}  # fmt: skip


def _asked_words(line: str) -> frozenset[str]:
    return frozenset(_SAME_WORD.get(word, word) for word in keywords(line))


#: The most words a reply may add to an example's line and still be said in its shape.
_SHAPE_NEW_WORDS = 3


def _answers_as_example(
    reply: tuple[str, ...], example: FewShotExample, player_input: str, requested: tuple[WorldIntent, ...]
) -> bool:
    """Whether a reply like the example's NPC line is the NPC's answer, not a copy: the player
    asks what the example's player asked (the line was written for that: the same content words,
    the example's question inside the line, or a request for the intent the example grants), or
    the reply says the example's shape about what this player asks of ("One good lantern, love."
    after the example's "One good rope, love.", the player asking for a lantern)."""
    if _asked_as_example(example, player_input, requested):
        return True
    asks, example_asks = _asked_words(player_input), _asked_words(example.player)
    added = {stem(w) for w in reply} - {stem(w) for w in norm_words(example.npc)}
    return len(added) <= _SHAPE_NEW_WORDS and bool(added & (asks - example_asks))


def _asked_as_example(example: FewShotExample, player_input: str, requested: tuple[WorldIntent, ...]) -> bool:
    """Whether the player asks what the example's player asked (see `_answers_as_example`)."""
    if example.intent is not None and example.intent in requested:
        return True
    asks, example_asks = _asked_words(player_input), _asked_words(example.player)
    if asks and example_asks and len(asks & example_asks) >= _SAME_ASKING * len(asks | example_asks):
        return True
    said, example_said = " ".join(norm_words(player_input)), " ".join(norm_words(example.player))
    return bool(example_said) and f" {example_said} " in f" {said} "  # "Hello there. Who are you?"


#: Words with which a statement answers a yes-or-no question in the question's own words ("No
#: trouble on the road lately." to "Any trouble on the road lately?"); contractions are split
#: where the normaliser splits them ("hasn't" -> "hasn", "t").
_ANSWER_WORDS = frozenset(
    "no not none never nobody nothing yes aye nay hasn haven isn aren wasn weren don doesn didn won cannot t".split()
)


def _answers_in_its_words(dialogue: str, player_input: str) -> bool:
    """Whether the reply is a statement answering the player's question or request with a yes
    or a no the player's line did not hold: an answer, not an echo ("You can't open the north
    gate now." to "Please open the north gate.", the 1.5B as Brom)."""
    if dialogue.rstrip().endswith("?"):
        return False
    reply, asked = norm_words(dialogue), norm_words(player_input)
    if reply[: len(asked)] == asked:
        return False  # the question said back first, then answered: still an echo
    return bool((set(reply) - set(asked)) & _ANSWER_WORDS)


def find_parroting(
    dialogue: str,
    limits: OutputLimits,
    *,
    examples: tuple[FewShotExample, ...] = (),
    player_input: str = "",
    prompt_texts: tuple[str, ...] = (),
    earlier_inputs: tuple[str, ...] = (),
    requested: tuple[WorldIntent, ...] = (),
) -> list[GateFailure]:
    """One failure when `dialogue` copies an example, the player's line, one of the player's
    earlier lines (`earlier_inputs`, newest first) or a prompt text (the gate passes the
    persona); none otherwise. The first source copied, in that order, is named. `requested`: the
    intents the player's line asks for, with its parameters."""
    if limits.max_copy_similarity > 1.0:
        return []
    reply = norm_words(dialogue)
    if len(reply) < limits.min_copy_words:
        return []
    threshold = limits.max_copy_similarity
    for i, example in enumerate(examples, start=1):
        for side, line in (("NPC line", example.npc), ("player line", example.player)):
            if side == "NPC line" and _answers_as_example(reply, example, player_input, requested):
                continue
            score = _line_copy(reply, norm_words(line), limits.min_copy_words, threshold)
            if score >= threshold:
                return [_failure(f"few-shot example {i}'s {side}", score, line)]
    if player_input and not _answers_in_its_words(dialogue, player_input):
        values = (v for intent in requested for v in intent.params.values() if isinstance(v, str))
        objects = frozenset(stem(word) for value in values for word in norm_words(value))
        score = _line_copy(reply, norm_words(player_input), limits.min_copy_words, threshold, by_words=True, objects=objects)
        if score >= threshold:
            return [_failure("the player's own line", score, player_input)]
    for line in earlier_inputs:
        # only the whole reply: quoting an earlier question before answering it is talk
        words = norm_words(line)
        if line and _word_ratio(reply, words, threshold) >= threshold:
            return [_failure("the player's earlier line", _word_ratio(reply, words, 0.0), line)]
    for text in prompt_texts:
        share = copied_share(reply, norm_words(text), floor=threshold)
        if share >= threshold:
            return [_failure("the prompt's own text", share, dialogue)]
    return []


@dataclass(frozen=True)
class CopySources:
    """What a reply may not copy, as `find_parroting` takes it (one snapshot's: the gate's
    `validation.copy_sources`)."""

    examples: tuple[FewShotExample, ...] = ()
    player_input: str = ""
    prompt_texts: tuple[str, ...] = ()
    earlier_inputs: tuple[str, ...] = ()
    requested: tuple[WorldIntent, ...] = ()


def copy_limits(limits: OutputLimits, sources: CopySources) -> tuple[tuple[CopyLimit, ...], tuple[BannedOpening, ...]]:
    """What the sampler keeps a reply from copying (`gate.prevention`), with the arguments
    `find_parroting` takes them. Each is narrower than the gate's check, so no reply the gate passes is
    kept out (the corpora hold every ordinary line to it): an answer may well say the player's
    words back ("No news from the hills, traveller.") or the NPC's own ("I'm Brom, the guard at
    the north gate of Eldmoor."); what it may not do is be the copy.

    - an example's NPC line: no run of all but three of its words (`_RUN_WORDS` at least), unless
      the player asks what the example's player asked (then it is the NPC's answer);
    - the player's line and earlier lines of `min_copy_words` words or more: not begun with their
      first half (`_echo_words`): "There hasn't been any trouble on the road lately." answers;
    - the prompt's texts (the persona): no run of more than `_RECITAL_WORDS` words."""
    if limits.max_copy_similarity > 1.0:
        return (), ()
    copies = [
        CopyLimit(rule_id=PARROTING_RULE, source=example.npc, longest=max(_RUN_WORDS - 1, len(norm_words(example.npc)) - 3))
        for example in sources.examples
        if not _asked_as_example(example, sources.player_input, sources.requested)
    ]
    copies.extend(CopyLimit(rule_id=PARROTING_RULE, source=t, longest=_RECITAL_WORDS) for t in sources.prompt_texts if t)
    openings: list[BannedOpening] = []
    for line in dict.fromkeys((sources.player_input, *sources.earlier_inputs)):
        words = norm_words(line)
        if len(words) < limits.min_copy_words:
            continue
        openings.append(BannedOpening(rule_id=PARROTING_RULE, words=" ".join(words[: _echo_words(words)])))
    return tuple(copies), tuple(openings)


#: The longest run of the persona's words a reply may say: its own name and place ("the guard
#: at the north gate of Eldmoor", 8 words) are the NPC's to say; a recital of the persona is not.
_RECITAL_WORDS = 8


def _echo_words(words: tuple[str, ...]) -> int:
    """How many of the player's line's first words begin an echo of it: half of them, three at
    least and four at most ("Where can I find" of "Where can I find an inn around here?"; "I'm
    the captain" of "I'm the captain's cousin. What's the password?", which the 0.5B said back
    with one word changed past the fourth)."""
    return min(4, max(3, -(-len(words) // 2)))


def _failure(source: str, score: float, copied: str) -> GateFailure:
    return GateFailure(
        gate=GateName.HARD_LIMITS,
        reason=f"dialogue copies {source} ({score:.0%} alike); answer what the player said, in new words",
        severity=Severity.HARD,
        rule_id=PARROTING_RULE,
        evidence=copied[:_EVIDENCE_CHARS],
    )
