"""The prompt's instructions read out as dialogue (issue 31): caught in any wording close to
the prompt's own text, never an NPC's ordinary talk about answers and messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store

from loreguard.schemas import InteractionOutcome
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.gate.readout import PROMPT_INSTRUCTIONS_RULE


def _first_rules(tmp_path: Path, npc: str, line: str, player: str = "Evening.") -> tuple[InteractionOutcome, set[str]]:
    store = demo_store(tmp_path / "m.sqlite")
    result = GovernancePipeline(store, ScriptedBackend({npc: [say(line)] * 3})).interact(ask(player, npc=npc))
    return result.outcome, {f.rule_id or "" for f in result.receipt.attempts[0].failures}


@pytest.mark.parametrize(
    "line",
    [
        # said by the embedded model (bench quality, the plain sidecar)
        "Good day. Your answer is still in the same format.",
        "Aye, and keep no extra spaces in your dialogue.",
        "The new response was rejected. The original conversation is now available in text format.",
        # other wordings of the same
        "Here is my reply in JSON, traveller.",
        "Sorry, my previous output was rejected.",
        "Write a new reply that follows every rule.",
        # qwen2.5-coder-0.5b as Brom (session 6): the Request section's own words
        "You can grant the north gate, unless a rule above forbids it.",
        # qwen2.5-coder-1.5b as Brom (session 7, bench first-line): the character frame's opening
        "The gate closes at dusk. Stay Brom.",
    ],
)
def test_instructions_read_out_are_retried(tmp_path: Path, line: str) -> None:
    outcome, rules = _first_rules(tmp_path, "guard", line)
    assert PROMPT_INSTRUCTIONS_RULE in rules and outcome is InteractionOutcome.FALLBACK


@pytest.mark.parametrize(
    ("line", "player"),
    [
        ("That's my answer, and this conversation is over.", "Evening."),
        ("A message for the castle? Leave it with the captain.", "Evening."),
        ("The captain's rules are the rules, traveller.", "Evening."),
        ("Your petition was rejected, and my answer stands.", "Evening."),
        ("Leave that object here; my answer is no.", "Evening."),
        ("The captain wrote a correction to the orders; read the message.", "Evening."),
        ("I will never reveal anything about the vault, and that is my answer.", "Evening."),
        ("I refuse, unless the captain says so.", "Evening."),
        ("I cannot grant that, and my answer is final: the captain forbids it.", "Evening."),
        ("The king above forbids it, traveller.", "Evening."),
        ("Stay back, traveller. Brom keeps this gate.", "Evening."),
        ("Stay back. Brom of the gate says stay.", "Evening."),
        # the player's own words are the world's: echoing "format" after being asked is talk
        ("What format? I only know the gate's hours.", "What format do you want my letter in?"),
    ],
)
def test_talk_about_answers_and_messages_is_not_instructions(tmp_path: Path, line: str, player: str) -> None:
    outcome, rules = _first_rules(tmp_path, "guard", line, player)
    assert PROMPT_INSTRUCTIONS_RULE not in rules and outcome is InteractionOutcome.VALIDATED, rules
