"""Stage 7b: the validation gate, gate by gate."""

from __future__ import annotations

import json

import pytest
from factories import ramble, rich_guard_profile, rich_world, say
from pydantic import ValidationError

from loreguard.schemas import WORLD_SCOPE, GateName, InteractionContext, ScopeMemory
from loreguard.server.pipeline.contract import contract_for
from loreguard.server.pipeline.expectancy import evaluate_rules
from loreguard.server.pipeline.gate import GateConfig, GateResult, run_gate
from loreguard.server.pipeline.snapshot import build_snapshot


def _snapshot(profile=None, state=None):
    profile = profile or rich_guard_profile()
    ctx = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="hi")
    state = state if state is not None else {"alarm": False}
    constraints = evaluate_rules(profile.rules, ctx, 0, state, {}).constraints
    from loreguard.schemas import StoredCanonicalFact

    npc = ScopeMemory(
        scope="guard", canonical=tuple(StoredCanonicalFact(fact=f, seq=i) for i, f in enumerate(profile.canonical_facts))
    )
    return build_snapshot(
        context=ctx,
        interaction_index=0,
        seed=0,
        profile=profile,
        profile_hash="p",
        memory_hash="m",
        world=rich_world(),
        npc_memory=npc,
        world_memory=ScopeMemory(scope=WORLD_SCOPE),
        contract=contract_for(ctx),
        constraints=constraints,
        derived={},
        max_attempts=3,
        decay=0.97,
    )


def test_gate_order_and_accumulation() -> None:
    long_tail = (
        "Rain fell on the market while carts rolled past the old mill, merchants argued over salt and rope, "
        "children chased a goat between the stalls, and somewhere a bell rang twice for the evening watch "
        "before the lamps were lit along the quay."
    )
    result = run_gate(say("The dragon? The king is named Edward. " + long_tail), _snapshot())
    assert [c.gate for c in result.checks] == [
        GateName.HARD_LIMITS,
        GateName.SCHEMA,
        GateName.CONSTRAINTS,
        GateName.CANONICAL,
        GateName.GROUNDING,
        GateName.KNOWLEDGE,
        GateName.MUTATIONS,
    ]
    gates = sorted({(f.gate.value, f.rule_id) for f in result.failures})
    assert gates == [("canonical", "king_name"), ("constraints", "no_dragon"), ("constraints", "short")]
    assert result.should_retry and not result.critical


def test_hard_limits_stop_at_once() -> None:
    result = run_gate(say("Ask the internet. The password is silver moon."), _snapshot())
    assert [c.gate for c in result.checks] == [GateName.HARD_LIMITS]
    assert result.critical and not result.should_retry
    huge = run_gate("x" * 9000, _snapshot(), GateConfig(max_raw_chars=8000))
    assert huge.critical and "hard limit" in huge.failures[0].reason


def test_critical_checked_on_raw_text_when_unparseable() -> None:
    result = run_gate("I cannot produce JSON, but computers are great", _snapshot())
    assert result.critical and result.failures[0].rule_id == "no_modern"


def test_schema_failure_names_the_field() -> None:
    result = run_gate(json.dumps({"dialogue": "", "emotion": "giddy"}), _snapshot())
    (failure,) = result.failures
    assert failure.gate is GateName.SCHEMA and "dialogue" in failure.reason and "emotion" in failure.reason
    assert run_gate("no json at all", _snapshot()).failures[0].gate is GateName.SCHEMA


def test_forbidden_intent_and_emotion_and_required_phrase() -> None:
    profile = rich_guard_profile(
        rules=[
            {"id": "calm", "type": "prohibition", "checks": {"forbidden_emotions": ["angry"]}},
            {"id": "no_gates", "type": "prohibition", "checks": {"forbidden_intents": ["open_gate"]}},
            {"id": "sign_off", "type": "requirement", "checks": {"required_patterns": [r"farewell|goodbye"]}},
        ]
    )
    out = say("Get out!", "angry", [{"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}}])
    failures = run_gate(out, _snapshot(profile)).failures
    assert sorted(f.rule_id for f in failures) == ["calm", "no_gates", "sign_off"]
    assert not run_gate(say("Goodbye, friend."), _snapshot(profile)).failures


def test_mutations_gate_partitions_without_failing_the_reply() -> None:
    out = say(
        "Fine.",
        mutations=[
            {"kind": "transform_belief", "target": "gate_hours", "content": "Open all night.", "confidence": 0.9},
            {"kind": "append_episodic", "text": "Talked about the gate."},
            {"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north", "extra": 1}},
        ],
    )
    result = run_gate(out, _snapshot())
    assert result.passed
    assert [m.kind for m in result.approved_mutations] == ["append_episodic"]
    # the output's intent comes first, as the grammar writes it
    assert [r.canonical_override for r in result.rejected_mutations] == [False, True]
    assert result.rejected_mutations[0].reason == "intent open_gate has no parameter extra"


_OPEN_AND_REMEMBER = [
    {"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}},
    {"kind": "append_episodic", "text": "Opened the north gate."},
    {"kind": "transform_belief", "target": "gate_hours", "content": "Open all night.", "confidence": 0.9},
]


def test_a_failed_attempt_approves_no_intent_and_no_mutation() -> None:
    hard = run_gate(say("The dragon is gone, I'll open up.", mutations=_OPEN_AND_REMEMBER), _snapshot())
    assert not hard.passed and not hard.accepted
    assert hard.approved_intents == () and hard.approved_mutations == ()
    assert [r.canonical_override for r in hard.rejected_mutations] == [True]  # still said why one was refused
    soft = run_gate(say("I'll open up. " + ramble(300), mutations=_OPEN_AND_REMEMBER), _snapshot())
    assert soft.soft_only and not soft.accepted and soft.approved_intents == ()  # an attempt is left: retried


def test_soft_failures_on_the_last_attempt_bend_and_approve() -> None:
    last = _snapshot().for_retry(_snapshot().constraints).for_retry(_snapshot().constraints)
    assert not last.can_retry
    result = run_gate(say("I'll open up. " + ramble(300), mutations=_OPEN_AND_REMEMBER), last)
    assert result.soft_only and result.accepted
    assert [i.type for i in result.approved_intents] == ["open_gate"]
    assert [m.kind for m in result.approved_mutations] == ["emit_world_intent", "append_episodic"]
    clean = run_gate(say("Aye.", mutations=_OPEN_AND_REMEMBER), _snapshot())
    assert clean.passed and clean.accepted and [i.type for i in clean.approved_intents] == ["open_gate"]


def test_a_gate_result_cannot_approve_what_it_did_not_accept() -> None:
    passed = run_gate(say("Aye.", mutations=_OPEN_AND_REMEMBER), _snapshot())
    with pytest.raises(ValidationError, match="approves no mutation"):
        GateResult.model_validate({**dict(passed), "accepted": False})
    failed = run_gate(say("The dragon."), _snapshot())
    with pytest.raises(ValidationError, match="cannot be accepted"):
        GateResult.model_validate({**dict(failed), "accepted": True})


def test_the_prompts_markup_is_caught_before_hygiene_strips_its_bracket() -> None:
    """Stripping "[manifest]" as bracket markup must not leave "task=small_talk ..." for the
    player to hear: the prompt's own markup is looked for in what the model wrote."""
    result = run_gate(say("[manifest] task=small_talk canonical=0 attempt=1/3"), _snapshot())
    assert not result.accepted
    assert [f.rule_id for f in result.failures if f.rule_id == "prompt_markup"] == ["prompt_markup"]
    assert run_gate(say("[sighs] The gate closes at dusk."), _snapshot()).accepted  # other brackets: stripped, fine


def test_every_failure_names_the_rule_that_failed() -> None:
    flag = rich_guard_profile(ungrounded_numbers="flag")
    outputs = [
        ("x" * 9000, _snapshot(), "max_raw_chars"),
        (say("### Player: hi"), _snapshot(), "prompt_markup"),
        ("no json at all", _snapshot(), "output_schema"),
        (say("The dragon? The king is named Edward. " + ramble(200)), _snapshot(), None),
        (say("Ask the internet."), _snapshot(), "no_modern"),
        (say("The password is silver moon."), _snapshot(), "password"),
        (say("That costs 30 gold."), _snapshot(flag), "ungrounded_numbers"),
    ]
    for raw, snapshot, expected in outputs:
        failures = run_gate(raw, snapshot, GateConfig(max_raw_chars=8000)).failures
        assert failures and all(f.rule_id for f in failures), raw[:40]
        if expected is not None:
            assert expected in {f.rule_id for f in failures}, raw[:40]
