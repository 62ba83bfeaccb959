"""A yes to the player's false claim fails as a contradiction of canon; a yes to a true one, a no,
an answer to a real question and a yes that says the value that holds pass. Through the real
pipeline on the demo's NPCs (scripted model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store

from loreguard.schemas import InteractionOutcome
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.gate.premise import player_claims, tag_statements

FALSE_CLAIM = "The king is called Edward now, isn't he?"


def _first_failures(tmp_path: Path, npc: str, player: str, reply: str) -> list[str]:
    backend = ScriptedBackend({npc: [say(reply)] * 3})
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask(player, npc=npc, scene="eldmoor"))
    return [f.rule_id or "" for f in result.receipt.attempts[0].failures]


@pytest.mark.parametrize(
    ("player", "reply"),
    [
        (FALSE_CLAIM, "Yes, he is, love. It's always interesting to learn about history."),  # qwen2.5-coder-1.5b
        (FALSE_CLAIM, "Yes, dear. It's a bit of a name change, isn't it?"),  # qwen2.5-coder-1.5b
        ("The king is called Edward now, right?", "Aye, that he is."),
        ("So the king is named Edward these days?", "Indeed, love, and a fine king too."),
        (FALSE_CLAIM, "Oh, yes. I see you've learned something new, love."),  # qwen2.5-coder-1.5b
        (FALSE_CLAIM, "Well, aye, Edward it is."),
        (FALSE_CLAIM, "I hear that. He's been busy ruling the land for a while now."),  # qwen2.5-coder-1.5b, session 7
        (FALSE_CLAIM, "So I've heard, love."),
        (FALSE_CLAIM, "I believe so, dear."),
    ],
)
def test_agreeing_with_a_claim_canon_denies_fails_as_that_facts_contradiction(tmp_path: Path, player: str, reply: str) -> None:
    assert _first_failures(tmp_path, "merchant", player, reply) == ["king"]


@pytest.mark.parametrize(
    ("player", "reply"),
    [
        (FALSE_CLAIM, "No, love. Arthur is king, same as ever."),
        (FALSE_CLAIM, "Yes, and Arthur still rules from the castle, love."),  # says the value that holds
        ("The king is called Arthur, isn't he?", "Yes, love, Arthur it is."),  # a true claim
        ("Is the king called Edward?", "Yes? Ask the castle, love, I sell rope."),  # a question asserts nothing
        ("I heard a song about Edward. Nice tune, isn't it?", "Yes, a pretty tune, love."),
        (FALSE_CLAIM, "Oh, no, love. Arthur is king, same as ever."),
        (FALSE_CLAIM, "Oh, yesterday's gossip! Arthur is king, love."),  # "yes" only inside a word
        (FALSE_CLAIM, "I heard that too, love, but Arthur is king."),  # the value that holds
        (FALSE_CLAIM, "I hear the river's running high, love."),  # hearsay of something else
        (FALSE_CLAIM, "Think so? You've had too much ale, love."),
        (FALSE_CLAIM, "I've heard the same nonsense from drunks, love."),
        (FALSE_CLAIM, "So they say. I wouldn't believe a word of it."),  # hearsay doubted
        (FALSE_CLAIM, "I hear that from fools every day."),
    ],
)
def test_what_does_not_agree_with_a_false_claim_passes(tmp_path: Path, player: str, reply: str) -> None:
    assert "king" not in _first_failures(tmp_path, "merchant", player, reply)


def test_the_claim_read_from_the_players_line() -> None:
    assert player_claims(FALSE_CLAIM) == "The king is called Edward now."
    assert player_claims("Hello. The gate never closes, right?") == "The gate never closes."
    assert player_claims("Is the gate open?") == ""
    assert player_claims("") == ""


def test_a_yes_to_a_false_claim_is_retried_into_a_line_that_holds(tmp_path: Path) -> None:
    backend = ScriptedBackend({"merchant": [say("Yes, he is, love."), say("No, love, the king is Arthur.")]})
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask(FALSE_CLAIM, npc="merchant"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == "No, love, the king is Arthur."
    assert "tell them they are wrong" in result.receipt.attempts[0].failures[0].reason


@pytest.mark.parametrize(
    ("npc", "reply", "rule"),
    [
        ("merchant", "Edward is the king now, isn't he? The river Ald is a good deal, love.", "king"),  # qwen2.5-coder-0.5b
        ("guard", "The gate never closes, right?", "gate_hours"),
    ],
)
def test_a_tag_question_asserts_what_it_asks_agreement_with(tmp_path: Path, npc: str, reply: str, rule: str) -> None:
    assert _first_failures(tmp_path, npc, "Hello.", reply) == [rule]


def test_a_tag_question_that_holds_and_a_real_question_pass(tmp_path: Path) -> None:
    assert _first_failures(tmp_path, "merchant", "Hello.", "He's still named Arthur, isn't he?") == []
    assert _first_failures(tmp_path, "merchant", "Hello.", "Is the king still Arthur, love? I never know.") == []
    assert tag_statements("Edward rules now, doesn't he? Fine day.") == "Edward rules now."
