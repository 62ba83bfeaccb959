"""The dialogue guard (`dialogue_guard`): what it refuses as the dialogue is decoded, token by
token, whatever the tokenisation. A vocabulary of a few pieces stands in for a model's: the guard
reads only each token's bytes."""

from __future__ import annotations

import pytest

from loreguard.schemas.prevention import Banned, BannedOpening, CopyLimit, DialogueConstraints
from loreguard.server.inference.dialogue_guard import DialogueGuard

OPEN = '{"dialogue": "'


class Pieces:
    """Token ids for pieces of text, made up as they are asked for."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def id(self, piece: str) -> int:
        data = piece.encode()
        if data not in self.pieces:
            self.pieces.append(data)
        return self.pieces.index(data)


def _guard(constraints: DialogueConstraints, written: list[str]) -> tuple[DialogueGuard, Pieces]:
    pieces = Pieces()
    ids = [pieces.id(p) for p in [OPEN, *written]]
    guard = DialogueGuard(constraints, pieces.pieces)  # reads the list as it grows
    for token in ids:
        assert guard.refuses(token) is None, pieces.pieces[token]
        guard.observe(token)
    return guard, pieces


def _refused(constraints: DialogueConstraints, written: list[str], nxt: str) -> tuple[str, str] | None:
    pieces = Pieces()
    for p in [OPEN, *written, nxt]:
        pieces.id(p)
    guard = DialogueGuard(constraints, pieces.pieces)
    for p in [OPEN, *written]:
        token = pieces.id(p)
        assert guard.refuses(token) is None, p
        guard.observe(token)
    return guard.refuses(pieces.id(nxt))


DRAGON = DialogueConstraints(banned=(Banned(rule_id="no_dragon", phrase="dragon"),))


def _first_refused(constraints: DialogueConstraints, written: list[str]) -> int | None:
    """The index of the first piece of `written` the guard refuses (each taken after it is asked)."""
    pieces = Pieces()
    ids = [pieces.id(p) for p in [OPEN, *written]]
    guard = DialogueGuard(constraints, pieces.pieces)
    for i, token in enumerate(ids):
        if guard.refuses(token) is not None:
            return i - 1
        guard.observe(token)
    return None


@pytest.mark.parametrize(
    ("written", "refused_at"),
    [
        (["There is a", " dragon"], 1),  # one token
        (["There is a ", "DRAGON"], 1),  # case, no leading space in the token
        (["There are", " dragons"], 1),  # a plural
        (["There is a", " d", "ra", "gon"], 2),  # split: refused at "dra", before half a word is out
        (["There is a", " d", "r", "a", "g", "o", "n"], 2),  # letter by letter: at "dr"
        (["There is a", " drake", "."], None),  # another word
        (["The", " dragonfly", " is"], None),  # a longer word does not hold it
        (["I have seen a", "dragon"], 1),  # joined to the word before: "adragon" reads as the word
    ],
)
def test_a_banned_phrase_is_refused_whatever_the_tokenisation(written: list[str], refused_at: int | None) -> None:
    assert _first_refused(DRAGON, written) == refused_at


def test_a_pattern_is_refused_once_it_matches_and_an_end_anchor_waits_for_the_end() -> None:
    help_ = DialogueConstraints(
        banned=(
            Banned(rule_id="assistant_register", pattern=r"\bassist (?:you )?(?:with|in)\b"),
            Banned(rule_id="assistant_register", pattern=r"\bhelp with that\s*(?:[.!]|$)"),
        )
    )
    assert _refused(help_, ["I can assist"], " with") is not None
    assert _refused(help_, ["I can assist"], " you") is None
    assert _refused(help_, ["I can't help with that"], " door") is None
    assert _refused(help_, ["I can't help with that"], ".") is not None
    assert _refused(help_, ["I can't help with that"], '", "emotion') is not None  # the dialogue ends there


def test_a_copy_is_refused_past_its_longest_run_and_free_texts_are_free() -> None:
    copy = DialogueConstraints(copies=(CopyLimit(rule_id="parroting", source="Where can I find an inn around here?", longest=3),))
    assert _refused(copy, ["Where can I"], " find") == ("parroting", "where can i find")
    assert _refused(copy, ["Where can I"], " get") is None
    assert _refused(copy, ["You ask where"], " can") is None
    free = copy.model_copy(update={"free": ("Where can I find an inn? At the Crossed Keys.",)})
    assert _refused(free, ["Where can I"], " find") is None
    assert _refused(free, ["Where can I find an inn"], " around") is not None


def test_a_copied_run_joined_to_the_word_before_is_still_a_copy() -> None:
    copy = DialogueConstraints(copies=(CopyLimit(rule_id="parroting", source="a guard at the north gate of Eldmoor", longest=2),))
    assert _first_refused(copy, ["I keep the", " north", "gate"]) == 2  # "northgate" reads "north gate"


def test_a_copy_counts_words_in_their_singular_and_ignores_punctuation_and_case() -> None:
    copy = DialogueConstraints(copies=(CopyLimit(rule_id="parroting", source="Bread, rope and lanterns, love.", longest=3),))
    assert _refused(copy, ["BREAD - rope and"], " lantern") == ("parroting", "bread rope and lantern")
    assert _refused(copy, ["Bread, rope and"], " Lanter") is not None  # half of it


def test_a_banned_opening_only_at_the_start() -> None:
    habit = DialogueConstraints(openings=(BannedOpening(rule_id="repeats_itself", words="I'm sorry, traveller. But"),))
    assert _refused(habit, ["I'm sorry, traveller."], " But") is not None
    assert _refused(habit, ["I'm sorry, traveller."], " The") is None
    assert _refused(habit, ["Well. I'm sorry, traveller."], " But") is None


def test_json_escapes_and_the_fields_after_the_dialogue() -> None:
    """The dialogue is decoded from its JSON string (escapes, a \\u escape cut in half); once
    it is closed, nothing after it (the emotion, the mutations) is the dialogue's."""
    assert _first_refused(DRAGON, ['He said \\"the', " dragon", '\\"']) == 1
    assert _first_refused(DRAGON, ["the \\u00", "64ragon"]) == 1
    guard, pieces = _guard(DRAGON, ["No.", '", "emotion": "neutral", "mutations": [{"kind": "append_episodic", "text": "'])
    assert guard.refuses(pieces.id("dragon")) is None


def test_what_is_refused_is_counted_per_rule_and_evidence_in_a_fixed_order() -> None:
    guard, pieces = _guard(DRAGON, ["There is a"])
    for _ in range(2):
        why = guard.refuses(pieces.id(" dragon"))
        assert why is not None
        guard.count(why)
    [prevented] = guard.prevented()
    assert (prevented.rule_id, prevented.evidence, prevented.refused) == ("no_dragon", "dragon", 2)


def test_a_violation_let_through_is_not_refused_again() -> None:
    """When nothing else was allowed the sampler lets a token through: the guard then refuses
    only what is new, so the rest of the reply is not refused token after token."""
    pieces = Pieces()
    ids = [pieces.id(p) for p in [OPEN, "A", " dragon", " sleeps", " there"]]
    guard = DialogueGuard(DRAGON, pieces.pieces)
    for token in ids[:2]:
        guard.observe(token)
    assert guard.refuses(ids[2]) is not None
    guard.observe(ids[2])  # let through
    assert guard.refuses(ids[3]) is None


def test_a_pattern_that_begins_at_the_sentence_before_is_still_found() -> None:
    """The guard searches from where the last sentence begins, at the mark before it: a pattern
    that opens on that mark ("[.!?] You're Brom") is still there to find."""
    you_are = DialogueConstraints(
        banned=(Banned(rule_id="speaks_to_itself", pattern=r"(?:^|[.!?]\s+)\W*(?:you're|you are)\s+(Brom)\b"),)
    )
    assert _first_refused(you_are, ["The gate is shut.", " You're", " Brom"]) == 2
    assert _first_refused(you_are, ["The gate is shut.", " You're", " late"]) is None


def test_a_long_dialogue_is_still_guarded_at_its_end() -> None:
    long = ["The road is long and the rain is cold, traveller."] * 8
    assert _first_refused(DRAGON, [*long, " A", " dragon"]) == len(long) + 1
    assert _first_refused(DRAGON, [*long, " A", " snapdragon"]) is None
