"""Stage 7b: the validation gate, gate by gate."""

from __future__ import annotations

import json

from factories import rich_guard_profile, rich_world, say

from loreguard.schemas import WORLD_SCOPE, GateName, InteractionContext, ScopeMemory
from loreguard.server.pipeline.contract import contract_for
from loreguard.server.pipeline.expectancy import evaluate_rules
from loreguard.server.pipeline.gate import GateConfig, run_gate
from loreguard.server.pipeline.snapshot import build_snapshot


def _snapshot(profile=None, state=None):  # noqa: ANN001, ANN202
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
    result = run_gate(say("The dragon? The king is named Edward. " + "blah " * 40), _snapshot())
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
    assert [r.canonical_override for r in result.rejected_mutations] == [True, False]
    assert result.rejected_mutations[1].reason == "intent open_gate has no parameter extra"
