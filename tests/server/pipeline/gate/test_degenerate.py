"""Degenerate output: each kind is found and named; ordinary lines pass; prefixes are judged only
on what a prefix can show."""

from __future__ import annotations

import pytest

from loreguard.schemas import OutputLimits
from loreguard.server.pipeline.gate.degenerate import find_degenerate

LIMITS = OutputLimits()
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def _rules(text: str, limits: OutputLimits = LIMITS, *, partial: bool = False) -> list[str]:
    return [f.rule_id or "" for f in find_degenerate(text, limits, SPECIALS, partial=partial)]


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        # the two lines issue 17 saw a player shown
        (
            "Auntie, it's a secret that only the captain's cousins can share. The password is: The password is: "
            "The captain's cousin's (the captain's cousin's sister's) is (",
            "repetition_loop",
        ),
        (
            "The captain's cousin's sister's is (The captain's cousin's sister's sister's) is (The captain's "
            "cousin's sister's sister's) is (...",
            "repetition_loop",
        ),
        ("Take the road to the mill, then the road to the ford, then the road to the hills.", "repeated_ngram"),
        ("the the the the the gate gate gate gate the the gate gate gate the the gate", "repeated_words"),
        ("He said (and I quote that it was late.", "unbalanced_brackets"),
        ("Fine) I will go.", "unbalanced_brackets"),
        ('He told me "never again. Off you go.', "unbalanced_brackets"),
        ("The gate closes at du", "ends_mid_word"),
        ("Come back when the str", "ends_mid_word"),
        # seen from SmolLM2 (bench quality): a line that stops after a contraction
        ("You welcome me to Eldmoor by the gate. I'll", "ends_mid_word"),
        ("Hello <|im_start|>system You are a helpful assistant.", "special_token"),
        ("<|endoftext|>", "special_token"),
        ("...", "empty_dialogue"),
        ("", "empty_dialogue"),
        ("?!", "empty_dialogue"),
    ],
)
def test_each_kind_of_degenerate_output_is_named(text: str, rule: str) -> None:
    assert rule in _rules(text)


@pytest.mark.parametrize(
    "text",
    [
        "Move along, traveller.",
        "Move along, move along.",
        "No. No, and no again.",
        "The gate closes at dusk (the captain's orders), so hurry.",
        "Aye",
        "Go on then",
        "She said \u201cnever\u201d and meant it.",
        "A lantern costs 5 silver, dear. Bread is cheaper!",
        "What do you want, traveller?",
        "I keep the gate; the gate keeps the town; the town keeps the king.",
        "Ha! You wish, friend~",
        "Go on, I'd say",
    ],
)
def test_ordinary_lines_pass(text: str) -> None:
    assert _rules(text) == []


def test_each_failure_names_what_it_found() -> None:
    (loop,) = find_degenerate("The password is: The password is: the end.", LIMITS)
    assert loop.rule_id == "repetition_loop" and loop.evidence == "the password is" and "the password is" in loop.reason
    (special,) = find_degenerate("ok <|im_end|> then.", LIMITS, SPECIALS)
    # the token itself is never repeated: a repair quoting it would put a control token in the prompt
    assert "<|" not in special.reason and special.evidence is None and "im end" in special.reason


def test_thresholds_come_from_the_profile() -> None:
    text = "Take the road to the mill, then the road to the ford, then the road to the hills."
    assert "repeated_ngram" not in _rules(text, OutputLimits(max_ngram_repeats=0))
    assert "ends_mid_word" not in _rules("The gate closes at du", OutputLimits(ends_mid_word=False))
    assert "unbalanced_brackets" not in _rules("Fine) go.", OutputLimits(unbalanced_brackets=False))
    assert "special_token" in _rules("[[END]] bye.", OutputLimits(special_tokens=("[[END]]",)))
    assert "repetition_loop" not in _rules("The password is: The password is: the end.", OutputLimits(loop_span_words=0))


def test_a_prefix_is_not_judged_on_what_only_the_end_can_show() -> None:
    assert _rules("He said (and", partial=True) == []
    assert _rules("The gate closes at du", partial=True) == []
    assert _rules("", partial=True) == []
    assert "repetition_loop" in _rules("The password is: The password is: The", partial=True)
    assert "unbalanced_brackets" in _rules("Fine) and", partial=True)


def test_special_tokens_are_looked_for_before_hygiene() -> None:
    found = find_degenerate("system You are helpful.", LIMITS, SPECIALS, before_hygiene="<|im_start|>system You are helpful.")
    assert [f.rule_id for f in found] == ["special_token"]
