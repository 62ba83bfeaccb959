"""Context contract: task classification, section gating, sufficiency."""

from __future__ import annotations

import pytest

from loreguard.schemas import InteractionContext
from loreguard.server.pipeline.contract import (
    ContextContract,
    Section,
    TaskType,
    Verdict,
    check_sufficiency,
    classify,
    contract_for,
)


@pytest.mark.parametrize(
    ("trigger", "text", "task"),
    [
        ("player_utterance", "Who is the king of this town?", TaskType.LORE_QUESTION),
        ("player_utterance", "Got any work for me? I need the reward.", TaskType.QUEST),
        ("player_utterance", "What's the price of that sword? I'll pay in gold.", TaskType.TRADE),
        ("player_utterance", "Nice hat!", TaskType.SMALL_TALK),
        ("quest_trigger", "", TaskType.QUEST),
        ("zone_trigger", "", TaskType.AMBIENT),
        ("time_trigger", "", TaskType.AMBIENT),
        ("world_event", "", TaskType.WORLD_EVENT),
        ("npc_interaction", "", TaskType.NPC_EXCHANGE),
        ("custom", "tell me the story of the war", TaskType.LORE_QUESTION),
    ],
)
def test_classification(trigger: str, text: str, task: TaskType) -> None:
    ctx = InteractionContext.model_validate({"npc_id": "n", "trigger_reason": trigger, "player_input": text})
    assert classify(ctx) is task


def test_sections_gate_memory() -> None:
    lore = contract_for(
        InteractionContext.model_validate(
            {"npc_id": "n", "trigger_reason": "player_utterance", "player_input": "Who is the king?"}
        )
    )
    assert Section.BELIEFS in lore.sections and Section.WORLD_STATE not in lore.sections
    quest = contract_for(InteractionContext.model_validate({"npc_id": "n", "trigger_reason": "quest_trigger"}))
    assert Section.WORLD_STATE in quest.sections and quest.required_prefixes == ("quest.",)


def test_sufficiency_pass_retry_clarify() -> None:
    contract = ContextContract(task_type=TaskType.QUEST, sections=(), required_prefixes=("quest.",))
    assert check_sufficiency(contract, (), {"quest.stage": 1}, {}).verdict is Verdict.PASS
    retry = check_sufficiency(contract, ("alarm",), {"quest.stage": 1}, {"alarm": False})
    assert retry.verdict is Verdict.RETRY and retry.derived == {"alarm": False}
    derived_prefix = check_sufficiency(contract, (), {}, {"quest.stage": 0})
    assert derived_prefix.verdict is Verdict.RETRY and derived_prefix.derived == {"quest.stage": 0}
    clarify = check_sufficiency(contract, ("alarm", "curfew"), {}, {"alarm": False})
    assert clarify.verdict is Verdict.CLARIFY
    assert clarify.missing == ("world_state:curfew", "world_state:quest.*")


def test_a_mistyped_key_asks_the_game_to_clarify_and_is_never_derived() -> None:
    contract = ContextContract(task_type=TaskType.SMALL_TALK, sections=())
    verdict = check_sufficiency(contract, (), {"curfew": "yes"}, {"curfew": False}, ("curfew",))
    assert verdict.verdict is Verdict.CLARIFY
    assert (verdict.missing, verdict.mistyped, verdict.derived) == (("world_state:curfew",), ("curfew",), {})
