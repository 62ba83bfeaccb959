"""Self-repeats: an NPC that says the same thing to every question. Pure and deterministic.

A small model that found one line it likes says it again and again: the guard gave one
160-character sentence to 17 different questions in a row. Each reply passed every other check,
so the player heard it 17 times. The gate fails such a reply hard (rule `repeats_itself`): the
reply as a whole, or any one of its sentences, is at least `max_self_similarity` alike (difflib's
ratio over the normalised words joined by spaces, as `parroting.similarity` measures a copy) to one of the NPC's last
`repeat_window` replies, or to one of their sentences. The retry's repair names the earlier line
("do not say ... or anything like it"), and the escalation forbids it.

Not a repeat:
- a sentence or reply shorter than `min_repeat_words` words: "Move along, traveller." is a line a
  guard may say every day;
- the same answer to the same question: when the player's line is the earlier one's, or as
  alike as `SAME_QUESTION` ("Open the gate." and "Please open the gate."), or both are silent (a
  greeting on each approach), saying the same again is consistent, not a loop.

The recent replies come from memory (`StateSnapshot.recent_replies`), so a replay compares with
the same lines; a streamed sentence is judged by the same gate before it is released.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

from loreguard.schemas.npc import OutputLimits
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import norm_words
from loreguard.server.pipeline.snapshot import RecentReply
from loreguard.server.pipeline.textnorm import sentences

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


def find_self_repeats(
    dialogue: str, player_input: str, recent: tuple[RecentReply, ...], limits: OutputLimits
) -> list[GateFailure]:
    """One failure when `dialogue` repeats one of `recent` (newest first) said to another player
    line; none otherwise. The newest earlier line repeated is named."""
    if not recent or not limits.repeat_window:
        return []
    mine = _pieces(dialogue, limits.min_repeat_words)
    if not mine:
        return []
    asked = norm_words(player_input)
    threshold = limits.max_self_similarity
    for earlier in recent[: limits.repeat_window]:
        if _same_question(norm_words(earlier.player), asked):
            continue  # the same question (or silence again) may get the same answer
        for said in _pieces(earlier.dialogue, limits.min_repeat_words):
            for piece in mine:
                score = _alike(piece, said, threshold)
                if score >= threshold:
                    return [_failure(said.text, score)]
    return []


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


def _failure(said: str, score: float) -> GateFailure:
    return GateFailure(
        gate=GateName.HARD_LIMITS,
        reason=(
            f"dialogue repeats what you said before to another question ({score:.0%} alike): "
            f"{said[:_EVIDENCE_CHARS]!r}; answer this line in new words"
        ),
        severity=Severity.HARD,
        rule_id=REPEATS_ITSELF_RULE,
        evidence=said[:_EVIDENCE_CHARS],
    )
