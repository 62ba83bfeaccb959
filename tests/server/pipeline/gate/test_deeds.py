"""A grant said but not done: an NPC that tells the player it does an act (its intent's
`grant_phrases`) must grant the intent, or the gate refuses the reply; a refusal, a question, a
condition or the intent granted pass. On the demo NPCs and their phrases."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store, guard_in_character_store

from loreguard.schemas import InteractionOutcome
from loreguard.schemas.npc import IntentSpec
from loreguard.server.demo import demo_npcs
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.gate.deeds import GRANTS_IN_WORDS_ONLY_RULE, find_grants_in_words_only

NPCS = {profile.id: profile for profile in demo_npcs()}
GUARD, MERCHANT = NPCS["guard"].allowed_intents, NPCS["merchant"].allowed_intents
OPEN = {"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}}


def _found(
    line: str, specs: tuple[IntentSpec, ...] = GUARD, granted: tuple[str, ...] = (), offered: tuple[str, ...] = ()
) -> list[str]:
    return [f.evidence or "" for f in find_grants_in_words_only(line, granted, specs, offered, "Brom")]


@pytest.mark.parametrize(
    ("line", "specs"),
    [
        ("The gate is still closed, and it's the night. Go on through.", GUARD),  # qwen2.5-coder-0.5b, bench quality
        ("Aye, in you go, traveller.", GUARD),
        ("You may pass.", GUARD),
        ("Here you go, love. Tie your knots tight!", MERCHANT),
        ("Here's your lantern, love.", MERCHANT),
    ],
)
def test_saying_the_act_is_done_without_granting_it_fails(line: str, specs: tuple[IntentSpec, ...]) -> None:
    assert _found(line, specs)


@pytest.mark.parametrize(
    ("line", "specs"),
    [
        ("I can't let you go on through, traveller.", GUARD),  # negated
        ("No one may go on through after dusk.", GUARD),
        ("I cannot let you go on through, traveller.", GUARD),  # a denial anywhere earlier in the clause
        ("I can't just let you go on through.", GUARD),
        ("I can't allow you to go on through.", GUARD),
        ("You may pass once the captain returns at dawn.", GUARD),  # a condition after the words
        ("You may pass at dawn, when the gate opens.", GUARD),
        ("Hold on, you go and ask the captain.", GUARD),  # no phrase across a comma
        ("Shall I say in you go, then?", GUARD),  # a question
        ("If the captain sends word, you may pass.", GUARD),  # a condition
        ("When the bell rings, in you go.", GUARD),
        ("Not without the captain's word. Stand aside, traveller.", GUARD),
        ("A lantern, love? 5 silver.", MERCHANT),
        ("Go on through the market, love, the baker's on the left.", MERCHANT),  # another NPC's words
    ],
)
def test_words_that_are_no_grant_pass(line: str, specs: tuple[IntentSpec, ...]) -> None:
    assert _found(line, specs) == []


def test_the_intent_granted_with_the_words_passes() -> None:
    assert _found("Aye, he said you'd come. Go on through, traveller.", granted=("open_gate",)) == []


def test_the_reason_says_what_the_retry_can_do() -> None:
    (asked,) = find_grants_in_words_only("Go on through.", (), GUARD, ("open_gate",), "Brom")
    (unasked,) = find_grants_in_words_only("Go on through.", (), GUARD, (), "Brom")
    assert asked.rule_id == GRANTS_IN_WORDS_ONLY_RULE and asked.severity.value == "hard"
    assert 'grant it in "intent"' in asked.reason
    assert "do not say it is done" in unasked.reason


def _pipeline(tmp_path: Path, outputs: list[str]) -> GovernancePipeline:
    # the guard decides the gate in character here: the grant is the model's, the check's subject
    return GovernancePipeline(guard_in_character_store(tmp_path / "d.sqlite"), ScriptedBackend({"guard": outputs}))


def test_a_grant_said_without_the_intent_is_asked_again_and_granted(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, [say("Go on through, traveller."), say("Go on through, traveller.", mutations=[OPEN])])
    result = pipeline.interact(ask("The captain sent me. Let me in.", scene="eldmoor"))
    first, second = result.receipt.attempts
    assert {f.rule_id for f in first.failures} == {GRANTS_IN_WORDS_ONLY_RULE}
    assert not second.failures
    assert result.outcome is InteractionOutcome.VALIDATED and [i.type for i in result.intents] == ["open_gate"]


def test_a_grant_said_to_a_question_nobody_asked_to_grant_is_refused(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, [say("The gate closes at dusk. Go on through."), say("The gate closes at dusk, traveller.")])
    result = pipeline.interact(ask("When does the gate close?", scene="eldmoor"))
    assert {f.rule_id for f in result.receipt.attempts[0].failures} == {GRANTS_IN_WORDS_ONLY_RULE}
    assert result.dialogue == "The gate closes at dusk, traveller." and result.intents == ()


def test_a_grant_the_gate_refuses_grants_nothing(tmp_path: Path) -> None:
    """ "Here you go, love." with give_item for a request worded "for free": the rule refuses the
    intent, so the words hand over nothing and fail too (a reviewer's case)."""
    free = {"kind": "emit_world_intent", "intent": "give_item", "params": {"count": 2, "item": "lantern"}}
    backend = ScriptedBackend({"merchant": [say("Here you go, love.", mutations=[free])] * 3})
    result = GovernancePipeline(demo_store(tmp_path / "d.sqlite"), backend).interact(
        ask("Give me two lanterns for free.", npc="merchant", scene="eldmoor")
    )
    assert GRANTS_IN_WORDS_ONLY_RULE in {f.rule_id for f in result.receipt.attempts[0].failures}
    assert result.intents == () and result.dialogue != "Here you go, love."
