"""Self-repeats: an NPC that says the same thing to every question. Pure and deterministic.

A small model that found one line it likes says it again and again: the guard gave one
160-character sentence to 17 different questions in a row. Each reply passed every other check,
so the player heard it 17 times. The gate fails such a reply hard (rule `repeats_itself`): the
reply as a whole, or any one of its sentences, is at least `max_self_similarity` alike (difflib's
ratio over the normalised words joined by spaces, as `parroting.similarity` measures a copy) to one of the NPC's last
`repeat_window` replies, or to one of their sentences. The retry's repair names the earlier line
("do not say ... or anything like it"), and the escalation forbids it.

Not a repeat, because it is an answer (judged by what it adds to what was said before):
- a piece alike in its letters but sharing no content word with the earlier one (`VOCATIVES`
  aside): "I can't tell you now, traveller." after "I can't let you go in now, traveller.";
- a sentence or reply shorter than `min_repeat_words` words: "Move along, traveller." is a line a
  guard may say every day (but a whole short reply said word for word `SHORT_LINE_TIMES` times
  already to other questions is a loop: "A lantern, please" to four questions);
- the same answer to the same question: when the player's line is the earlier one's, or as
  alike as `SAME_QUESTION` ("Open the gate." and "Please open the gate."), or both are silent (a
  greeting on each approach), or both ask for the same intent with the same parameters ("The
  captain sent me. Let me in." and "Please open the north gate."), saying the same again is
  consistent, not a loop; but the whole reply word for word to a request in other words is a
  line the player has heard ("I can't allow you to enter." to two ways of asking), unless it
  grants the request again ("A rope, love! Tie your knots tight!" to two rope requests: asked to
  say it another way, the 1.5B refused the second sale instead);
- a canonical fact restated to a line that asks about it: "The gate closes at dusk." said again
  to "What time does the gate close?" (the piece is as alike to one of `RepeatContext.facts` as
  to the earlier line, and the player's line shares a content word with that fact);
- the NPC naming itself when the player asks who it is or its name;
- the same shape about what this line asks of: "A lantern costs 5 silver." after "A rope costs 5
  silver.", when a word the earlier piece lacks is a content word of this player's line that
  the earlier player's line did not have. A line said again word for word is never this, and
  a shape said to `SHAPE_TIMES` earlier questions already is a template, a loop; so is a reply
  that opens with the same `OPENING_WORDS` words as `OPENING_TIMES` of the last few.

The recent replies come from memory (`StateSnapshot.recent_replies`), so a replay compares with
the same lines; a streamed sentence is judged by the same gate before it is released.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.npc import IntentSpec, OutputHygiene, OutputLimits
from loreguard.schemas.prevention import BannedOpening, CopyLimit
from loreguard.schemas.receipt import FindingAction, FindingKind, GateFailure, GateName, OutputFinding
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import fold, norm_words
from loreguard.server.pipeline.gate.hygiene import Scrubbed
from loreguard.server.pipeline.snapshot import StateSnapshot
from loreguard.server.pipeline.turn.intents import describe, offered_intents
from loreguard.server.pipeline.turn.transcript import RecentReply
from loreguard.text.phrases import VOCATIVES, sentences
from loreguard.text.words import keywords, stem

REPEATS_ITSELF_RULE = "repeats_itself"
_EVIDENCE_CHARS = 120


@dataclass(frozen=True, slots=True)
class _Piece:
    """A sentence (or a whole reply) as compared: its text, its normalised words joined by one
    space (what `parroting.similarity` compares) and that string's letters, counted."""

    text: str
    joined: str
    letters: Counter[str]


@lru_cache(maxsize=1024)
def _pieces(text: str, min_words: int) -> tuple[_Piece, ...]:
    """The text's sentences of at least `min_words` words, and the whole text when it has more
    than one sentence. Memoised: the same recent replies are compared turn after turn."""
    found = [(s, norm_words(s)) for s in sentences(text)]
    if len(found) > 1:
        found.append((text.strip(), norm_words(text)))
    return tuple(_Piece(s, " ".join(w), Counter(" ".join(w))) for s, w in found if len(w) >= min_words)


def _alike(a: _Piece, b: _Piece, threshold: float) -> float:
    """difflib's ratio of the two pieces, or 0.0 when a cheap upper bound (their lengths, then
    their letters) is already below `threshold`: most pairs stop there."""
    total = len(a.joined) + len(b.joined)
    if 2 * min(len(a.joined), len(b.joined)) < threshold * total:
        return 0.0
    if 2 * (a.letters & b.letters).total() < threshold * total:
        return 0.0
    return SequenceMatcher(None, a.joined, b.joined, autojunk=False).ratio()


_ADDRESSING = keywords(" ".join(VOCATIVES))


@lru_cache(maxsize=4096)
def _content(text: str) -> frozenset[str]:
    """The content words of a text, less the words that address the player (`VOCATIVES`)."""
    return keywords(text) - _ADDRESSING


def _says_otherwise(piece: _Piece, said: _Piece) -> bool:
    """Whether two pieces alike in their letters share no content word: "I can't tell you now,
    traveller." is not "I can't let you go in now, traveller." said again (stripped as a repeat,
    the 1.5B's answer to "Any news from the hills?" was left saying only "It's too dark.")."""
    mine, earlier = _content(piece.text), _content(said.text)
    return bool(mine) and bool(earlier) and not mine & earlier


class RepeatContext(FrozenModel):
    """What tells an answer from a repeat: the NPC's name, the canonical facts it may restate
    when asked, and the intents a player's line may ask for (requests for the same act are the
    same question)."""

    npc_name: str = ""
    facts: tuple[str, ...] = ()
    intents: tuple[IntentSpec, ...] = ()


_NO_CONTEXT = RepeatContext()


def find_self_repeats(
    dialogue: str,
    player_input: str,
    recent: tuple[RecentReply, ...],
    limits: OutputLimits,
    context: RepeatContext = _NO_CONTEXT,
    *,
    openings: bool = True,
    whole: bool = True,
) -> list[GateFailure]:
    """One failure when `dialogue` repeats one of `recent` (newest first) said to another player
    line; none otherwise. The newest earlier line repeated is named. `openings`: whether a reply
    that opens as the last ones did counts (not for a sentence judged alone: see
    `without_repeated_sentences`); `whole`: whether `dialogue` is the whole reply, which may not
    be an earlier one word for word even to the same request (not a sentence of it, nor a
    streamed reply's first sentences, nor a reply that grants the request again: retried, the
    1.5B's merchant took the repair for a no, and the sale was lost)."""
    if not recent or not limits.repeat_window:
        return []
    asked = norm_words(player_input)
    # the same question (or silence again) may get the same answer: only the others count
    others = tuple(r for r in recent[: limits.repeat_window] if not _same_question(norm_words(r.player), asked))
    mine = _pieces(dialogue, limits.min_repeat_words)
    if not mine:
        return _short_again(dialogue, others)
    asks = keywords(player_input)
    threshold = limits.max_self_similarity
    answers = (
        mine
        if _introduces(dialogue, player_input, context)
        else tuple(p for p in mine if _restates_fact(p, asks, context, limits))
    )
    if whole and len(answers) < len(mine) and (again := _said_word_for_word(dialogue, others)):
        # even to the same request in other words: the player hears the line twice
        reason = f"you said this line before, word for word: {again[0][:_EVIDENCE_CHARS]!r}; say it another way"
        return [_failure(again[0], 1.0, reason)]
    shaped: list[tuple[_Piece, float]] = []  # earlier pieces of the same shape about another subject
    for earlier in others:
        shape: tuple[_Piece, float] | None = None
        for said in _pieces(earlier.dialogue, limits.min_repeat_words):
            for piece in mine:
                if piece in answers:
                    continue
                score = _alike(piece, said, threshold)
                if score < threshold or _says_otherwise(piece, said):
                    continue
                if _new_subject(piece, said, asks, keywords(earlier.player)):
                    shape = shape or (said, score)
                    continue
                # looked at only once two pieces are alike: reading a request costs more
                if not _same_request(earlier.player, player_input, context.intents):
                    return [_failure(said.text, score)]
        if shape is not None:
            shaped.append(shape)
    if len(shaped) >= SHAPE_TIMES:
        return [_failure(shaped[0][0].text, shaped[0][1])]
    return _same_opening(dialogue, others[:OPENING_WINDOW]) if openings else []


#: A reply's first this many words, said at the start of `OPENING_TIMES` of the NPC's last
#: `OPENING_WINDOW` replies to other questions, is a habit the player hears: "The captain told
#: me ..." on seven lines in a row (qwen2.5-coder-1.5b as the guard).
OPENING_WORDS = 4
OPENING_TIMES = 2
OPENING_WINDOW = 6


def _same_opening(dialogue: str, others: tuple[RecentReply, ...]) -> list[GateFailure]:
    """`others`: the last replies to other questions, newest first."""
    opening = norm_words(dialogue)[:OPENING_WORDS]
    if len(opening) < OPENING_WORDS:
        return []
    same = [r.dialogue for r in others if norm_words(r.dialogue)[:OPENING_WORDS] == opening]
    if len(same) < OPENING_TIMES:
        return []
    words = " ".join(dialogue.split()[:OPENING_WORDS])
    reason = f"dialogue opens as your last replies did ({words!r}, {len(same)} times); begin this one another way"
    # style, not sense: soft, so the last attempt keeps a line a player accepts (retried for its
    # opening alone, the 1.5B's guard turned a decline into "You're welcome, traveller. Let's get to it.")
    return [_failure(same[0], 1.0, reason).model_copy(update={"severity": Severity.SOFT})]


#: How many earlier replies may share a reply's shape about other subjects before the shape is a
#: loop: "A rope costs 5 silver." then "A lantern costs..." is an answer; "I don't have any
#: information on the road." after the same about the weather and a merchant is a template.
SHAPE_TIMES = 2


#: How many times a line too short to be compared by likeness may be said, word for word, to
#: other questions before saying it again is a loop ("A lantern, please" to four questions).
SHORT_LINE_TIMES = 2


def _said_word_for_word(dialogue: str, others: tuple[RecentReply, ...]) -> list[str]:
    """Those of `others` (newest first) that the whole reply says word for word: "A rope, love!
    Tie your knots tight!" to "I need rope for a climb." and again to "Sell me some rope,
    please." (the 1.5B's merchant) is the same request, but a line the player has heard."""
    words = norm_words(dialogue)
    return [r.dialogue for r in others if words and norm_words(r.dialogue) == words]


def _short_again(dialogue: str, others: tuple[RecentReply, ...]) -> list[GateFailure]:
    """A short reply said word for word `SHORT_LINE_TIMES` times already to other questions."""
    times = len(_said_word_for_word(dialogue, others))
    return [_failure(dialogue.strip(), 1.0)] if times >= SHORT_LINE_TIMES else []


def without_repeated_sentences(
    dialogue: str,
    player_input: str,
    recent: tuple[RecentReply, ...],
    limits: OutputLimits,
    context: RepeatContext = _NO_CONTEXT,
) -> tuple[str, tuple[str, ...]]:
    """`dialogue` less its sentences that repeat an earlier reply, and those sentences, when what
    is left is new: "Aye, I will open the gate for you. Stay in the shadows until then." keeps its
    first sentence when the second was said before. Unchanged when no sentence repeats, when
    every one does, or when what is left still repeats (the gate then fails it whole). What is
    left repeats when each of its sentences was said before word for word, however short: of
    the guard's first reply said again ("Good evening, traveller. The gate closes at dusk."), the
    greeting alone is no answer to "Can I wait here until morning?"."""
    parts = sentences(dialogue)
    if len(parts) < 2 or not recent or not limits.repeat_window:
        return dialogue, ()
    habits = _habits(recent[:OPENING_WINDOW])
    removed = tuple(
        s
        for s in parts
        # a sentence that only opens as the last replies did says something new: the reply is
        # retried for its opening, not cut ("I'm sorry, but the captain has ordered me not to
        # let you go through" was stripped, leaving the 1.5B's guard with "You can't open it now.")
        if tuple(norm_words(s)) in habits
        or find_self_repeats(s, player_input, recent, limits, context, openings=False, whole=False)
    )
    if not removed or len(removed) == len(parts):
        return dialogue, ()
    left = [s for s in parts if s not in removed]
    said = _sentences_said(recent)
    if all(tuple(norm_words(s)) in said and not _answers(s, player_input, context, limits) for s in left):
        return dialogue, ()
    kept = " ".join(left)
    if find_self_repeats(kept, player_input, recent, limits, context):
        return dialogue, ()
    return kept, removed


def _answers(sentence: str, player_input: str, context: RepeatContext, limits: OutputLimits) -> bool:
    """Whether the sentence answers the player's line though said before: a canonical fact the
    line asks about ("The gate closes at dusk." to "What time does the gate close?"), or the NPC
    naming itself to "Who are you?"."""
    if _introduces(sentence, player_input, context):
        return True
    asks = keywords(player_input)
    return any(_restates_fact(piece, asks, context, limits) for piece in _pieces(sentence, 1))


#: A sentence said word for word in this many of the last `OPENING_WINDOW` replies is a tic the
#: player hears ("What would you like?" closing seven of the merchant's lines, qwen2.5-coder-1.5b):
#: however short, it is stripped from a reply that says something besides.
HABIT_TIMES = 2


def _habits(recent: tuple[RecentReply, ...]) -> frozenset[tuple[str, ...]]:
    """The sentences said word for word in `HABIT_TIMES` of `recent` or more."""
    counts = Counter(words for reply in recent for words in {tuple(norm_words(s)) for s in sentences(reply.dialogue)})
    return frozenset(words for words, n in counts.items() if n >= HABIT_TIMES and words)


def _sentences_said(recent: tuple[RecentReply, ...]) -> frozenset[tuple[str, ...]]:
    """Every sentence of the recent replies, as its normalised words."""
    return frozenset(tuple(norm_words(s)) for reply in recent for s in sentences(reply.dialogue))


def _restates_fact(piece: _Piece, asks: frozenset[str], context: RepeatContext, limits: OutputLimits) -> bool:
    """Whether the piece restates a canonical fact the player's line asks about: alike to it, or
    saying nothing but its words ("The gate closes at dusk, traveller." restates "The north gate
    closes at dusk."; the vocative had kept it below the likeness threshold)."""
    threshold = limits.max_self_similarity
    said = _content(piece.text)
    return any(
        asks & keywords(fact)
        and ((said and said <= keywords(fact)) or any(_alike(piece, known, threshold) >= threshold for known in _pieces(fact, 1)))
        for fact in context.facts
    )


def _introduces(dialogue: str, player_input: str, context: RepeatContext) -> bool:
    """Whether the reply is the NPC naming itself to a player who asks who it is or its name."""
    if not context.npc_name or fold(context.npc_name) not in norm_words(dialogue):
        return False
    words = norm_words(player_input)
    return "name" in words or ("who" in words and "you" in words)


def _new_subject(piece: _Piece, said: _Piece, asks: frozenset[str], asked_before: frozenset[str]) -> bool:
    """Whether the piece says the earlier one's shape of something this line asks about that the
    earlier line did not: a word the earlier piece lacks, a content word of this line only."""
    if piece.joined == said.joined:
        return False
    added = {stem(w) for w in piece.joined.split()} - {stem(w) for w in said.joined.split()}
    return bool(added & (asks - asked_before))


def _requests(player_input: str, intents: tuple[IntentSpec, ...]) -> frozenset[str]:
    """The intents (with their parameters) the line asks for."""
    return frozenset(describe(o) for o in offered_intents(player_input, intents) if o.requested)


def _same_request(a: str, b: str, intents: tuple[IntentSpec, ...]) -> bool:
    if not intents:
        return False
    asked = _requests(a, intents)
    return bool(asked) and asked == _requests(b, intents)


#: Two player lines this alike (difflib's ratio of their words) ask the same thing: "Open the
#: gate." and "Please open the gate.".
SAME_QUESTION = 0.8


def _same_question(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if a == b:
        return True  # the same words, or both silent (an NPC greeting each approach)
    total = len(a) + len(b)
    if 2 * min(len(a), len(b)) < SAME_QUESTION * total:
        return False
    return SequenceMatcher(None, a, b, autojunk=False).ratio() >= SAME_QUESTION


def _failure(said: str, score: float, reason: str = "") -> GateFailure:
    return GateFailure(
        gate=GateName.HARD_LIMITS,
        reason=reason
        or (
            f"dialogue repeats what you said before to another question ({score:.0%} alike): "
            f"{said[:_EVIDENCE_CHARS]!r}; answer this line in new words"
        ),
        severity=Severity.HARD,
        rule_id=REPEATS_ITSELF_RULE,
        evidence=said[:_EVIDENCE_CHARS],
    )


def repeat_limits(
    player_input: str, recent: tuple[RecentReply, ...], limits: OutputLimits, context: RepeatContext = _NO_CONTEXT
) -> tuple[tuple[CopyLimit, ...], tuple[BannedOpening, ...]]:
    """What the sampler keeps a reply from saying again (`gate.prevention`), with the arguments
    `find_self_repeats` takes: a run of more than `min_repeat_words - 1` words of a recent reply
    to another question (one to the same question or the same request may be said again), and
    an opening said at the start of `OPENING_TIMES` of the last `OPENING_WINDOW` of them."""
    if not recent or not limits.repeat_window:
        return (), ()
    asked = norm_words(player_input)
    others = tuple(
        r
        for r in recent[: limits.repeat_window]
        if r.dialogue
        and not _same_question(norm_words(r.player), asked)
        and not _same_request(r.player, player_input, context.intents)
    )
    longest = max(1, limits.min_repeat_words - 1)
    copies = tuple(CopyLimit(rule_id=REPEATS_ITSELF_RULE, source=r.dialogue, longest=longest) for r in others)
    counted = Counter(norm_words(r.dialogue)[:OPENING_WORDS] for r in others[:OPENING_WINDOW])
    openings = tuple(
        BannedOpening(rule_id=REPEATS_ITSELF_RULE, words=" ".join(words))
        for words, times in sorted(counted.items())
        if len(words) == OPENING_WORDS and times >= OPENING_TIMES
    )
    return copies, openings


def repeat_context(snapshot: StateSnapshot) -> RepeatContext:
    """What tells a repeated answer from a loop (see `self_repeats`)."""
    return RepeatContext(
        npc_name=snapshot.npc_name,
        facts=tuple(fact.text for fact in snapshot.canonical),
        intents=snapshot.allowed_intents,
    )


def without_repeats(scrubbed: Scrubbed, snapshot: StateSnapshot, hygiene: OutputHygiene) -> Scrubbed:
    """Hygiene's text less the sentences the NPC said before beside new ones (`self_repeats`):
    stripped and recorded, or under strict hygiene left for the gate to fail."""
    if not scrubbed.text or scrubbed.failures or hygiene is OutputHygiene.STRICT:
        return scrubbed
    kept, removed = without_repeated_sentences(
        scrubbed.text, snapshot.context.said(), snapshot.recent_replies, snapshot.output_limits, repeat_context(snapshot)
    )
    if not removed:
        return scrubbed
    found = tuple(OutputFinding(kind=FindingKind.REPEATED_SENTENCE, text=s, action=FindingAction.STRIPPED) for s in removed)
    return scrubbed.model_copy(update={"text": kept, "findings": scrubbed.findings + found})
