"""Non-answers: a word from nowhere and an introduction instead of an answer fail; short
answers, interjections and introductions the player asked for pass. Lines from the Qwen2.5-Coder
models where marked."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import merchant_in_character, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas.receipt import FindingAction, FindingKind, OutputFinding
from loreguard.server.pipeline.gate.non_answers import NON_ANSWER_RULE, find_non_answer

KNOWN = (
    "You are Brom, a gruff but fair guard at the north gate of Eldmoor.",
    "The north gate closes at dusk.",
    "The king of Eldmoor is named Arthur.",
)


def _fails(line: str, player: str, speaker: str = "Brom the Gate Guard") -> bool:
    found = find_non_answer(line, player, speaker, KNOWN)
    assert all(f.rule_id == NON_ANSWER_RULE for f in found)
    return bool(found)


@pytest.mark.parametrize(
    ("line", "player"),
    [
        ("Nominated", "When does the gate close?"),  # qwen2.5-coder-0.5b, in the Godot demo
        ("Nominated.", "Any news from the hills?"),
        ("I'm Brom.", "Can I wait here until morning?"),  # qwen2.5-coder-1.5b
        ("Oh, hello there! I'm Brom, the guard of the north gate. What do you need?", "Is the road north safe?"),
        ("What would you like to talk about instead?", "The king is called Edward now, isn't he?"),  # 1.5b as Mira
        ("What else would you like to know about Eldmoor?", "Where is the old mill?"),  # 1.5b as Mira
        ("Well, traveller. Is there anything else you'd like to know?", "When does the gate close?"),
        ("Anything you want to ask about the market?", "Is the road north safe?"),
    ],
)
def test_a_line_that_answers_nothing_fails(line: str, player: str) -> None:
    assert _fails(line, player)


@pytest.mark.parametrize(
    ("line", "player"),
    [
        ("Dusk.", "When does the gate close?"),  # the facts hold it
        ("Arthur.", "Who is the king?"),
        ("Tomorrow.", "When does the market open?"),
        ("Hmph.", "Nice weather, isn't it?"),
        ("Nonsense!", "The king is called Edward now."),
        ("Seven.", "How many guards are there?"),
        ("Stay calm.", "Wolves! Wolves at the gate!"),  # two words are ordinary speech
        ("Wolves.", "What are you afraid of?"),  # a word from the player's own line... or near it
        ("I'm Brom.", "Who are you?"),
        ("I'm Brom, the guard here.", "What's your name?"),
        ("Hail, traveller. I'm Brom.", "Good evening."),
        ("I'm Brom. You can wait by the fire until dawn.", "Can I wait here until morning?"),
        ("I'm Brom.", "Hello there, guard."),
        ("What would you like to know?", "Can I ask you something?"),  # leave to ask, granted
        ("Go on, what do you want to know?", "I have a question for you."),
        ("What do you need?", "Can you help me?"),  # an offer of help is an answer
        ("What would you like to know?", "Can you tell me something?"),
        ("What would you like to know?", "Mind if I ask you something?"),
        ("What would you like to talk about?", "Do you have a moment?"),
        ("What do you want to know about it?", "Do you know anything about the mill?"),  # asks which part
        ("The mill? East of the river. What would you like to know about it?", "Where is the old mill?"),
        ("What would you like to talk about?", "Hello there."),  # no question asked
    ],
)
def test_a_short_answer_or_an_introduction_asked_for_passes(line: str, player: str) -> None:
    assert not _fails(line, player)


@pytest.mark.parametrize(
    ("line", "player", "fails"),
    [
        # 1.5b as Brom, session 6: what hygiene left once it cut an unfinished last sentence
        ("Good evening, traveller.", "Can I wait here until morning?", True),
        ("Hello there! Well met, stranger.", "How much is a lantern?", True),
        ("Good evening, traveller.", "Good evening. Anyone there?", False),  # greeted back
        ("Hello there, stranger.", "Is anyone there?", False),
        ("Evening, traveller. Shut till dawn.", "The gate's shut, isn't it?", False),  # beside an answer
    ],
)
def test_a_greeting_is_all_that_is_left_of_an_answer_only_when_cut_short(line: str, player: str, fails: bool) -> None:
    assert bool(find_non_answer(line, player, "Brom", KNOWN, (_stripped(FindingKind.SENTENCE_FRAGMENT, "I'm sorry"),))) is fails
    # written alone, a greeting may be the start of an answer (streamed, it is released first)
    assert find_non_answer(line, player, "Brom", KNOWN) == []


def _stripped(kind: FindingKind, text: str) -> OutputFinding:
    return OutputFinding(kind=kind, text=text, action=FindingAction.STRIPPED)


BREAD = "Give me a loaf of bread, here's a copper."
REFUSAL = _stripped(FindingKind.ASSISTANT_REGISTER, "I'm sorry, love, but I can't give you bread at this time.")


@pytest.mark.parametrize(
    ("line", "findings", "asked", "fails"),
    [
        # qwen2.5-coder-1.5b as Mira, session 7: the refusal stripped, a non-sequitur left
        ("We need to be careful with our supplies.", (REFUSAL,), True, True),
        ("The stall is not open today, love.", (REFUSAL,), True, False),  # what is left says no too
        ("Come back at dawn, love.", (REFUSAL,), True, False),  # puts the player off
        ("The bread's all gone to the castle, love.", (REFUSAL,), True, False),  # speaks of what was asked
        ("We need to be careful with our supplies.", (REFUSAL,), False, False),  # no request, or granted
        (
            "We need to be careful with our supplies.",
            (_stripped(FindingKind.ASSISTANT_REGISTER, "How can I help?"),),
            True,
            False,
        ),
        ("We need to be careful with our supplies.", (), True, False),
    ],
)
def test_a_refusal_stripped_as_an_assistants_leaves_no_answer_to_a_request(
    line: str, findings: tuple[OutputFinding, ...], asked: bool, fails: bool
) -> None:
    found = find_non_answer(line, BREAD, "Mira", KNOWN, findings, asked_for_act=asked)
    assert bool(found) is fails
    if fails:
        assert "say no in your own" in found[0].reason


def test_the_player_hears_a_refusal_not_what_was_left_of_one(tmp_path: Path) -> None:
    merchant = merchant_in_character()
    stripped = "I'm sorry, love, but I can't give you bread at this time. We need to be careful with our supplies."
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say(stripped), say("A copper? Bread's two, love.")], profile=merchant)
    result = pipeline.interact(ask(BREAD, npc="merchant"))
    assert [[f.rule_id for f in a.failures] for a in result.receipt.attempts] == [[NON_ANSWER_RULE], []]
    assert result.dialogue == "A copper? Bread's two, love."
