"""Retry escalation and repair, fallback order, the semantic judge with its keyword fallback."""

from __future__ import annotations

from pathlib import Path

from factories import eldmoor_world, guard_profile, rich_guard_profile, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import Constraint, GateFailure, GateName, RuleChecks, RuleType, Severity, TriggerReason
from loreguard.server.pipeline import PipelineConfig
from loreguard.server.pipeline.expectancy import ConstraintSet
from loreguard.server.pipeline.fallback import choose_fallback
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.inference import ScriptedBackend
from loreguard.server.pipeline.retry import EscalationMode, escalate, repair_message

BASE = ConstraintSet.of(
    [
        Constraint(
            rule_id="short", type=RuleType.PROHIBITION, severity=Severity.SOFT, text="ramble", checks=RuleChecks(max_length=50)
        ),
        Constraint(
            rule_id="greet",
            type=RuleType.REQUIREMENT,
            severity=Severity.SOFT,
            text="greet",
            checks=RuleChecks(required_phrases=("hail",)),
        ),
    ]
)
FAILURES = [
    GateFailure(gate=GateName.CONSTRAINTS, reason="missing required phrase", severity=Severity.SOFT, rule_id="greet"),
    GateFailure(
        gate=GateName.CONSTRAINTS, reason='forbidden phrase "orc"', severity=Severity.HARD, rule_id="no_orcs", evidence="orc"
    ),
    GateFailure(
        gate=GateName.KNOWLEDGE,
        reason="reveals secret password",
        severity=Severity.CRITICAL,
        rule_id="password",
        evidence="password",
    ),
]


def test_escalation_modes() -> None:
    assert escalate(BASE, FAILURES, EscalationMode.NONE) == BASE
    hardened = {c.rule_id: c for c in escalate(BASE, FAILURES, EscalationMode.HARDEN_REQUIREMENTS).constraints}
    assert hardened["greet"].severity is Severity.HARD and hardened["greet"].escalation == 1
    assert hardened["short"].severity is Severity.SOFT and hardened["short"].escalation == 0
    added = escalate(BASE, FAILURES, EscalationMode.ADD_SPECIFIC_PROHIBITION)
    assert "retry.no_orcs" in added.ids() and "retry.password" not in added.ids()
    full = escalate(BASE, FAILURES, EscalationMode.FULL)
    assert {"retry.no_orcs", "greet"} <= set(full.ids())
    assert full.to_prompt_injection().count("IMPORTANT") == 2


def test_repair_message_names_constraints_but_not_secrets() -> None:
    message = repair_message(FAILURES)
    assert "constraints (greet)" in message and "constraints (no_orcs)" in message
    assert "(password)" not in message


def test_fallback_order() -> None:
    world = eldmoor_world(
        fallbacks={"by_trigger": {"zone_trigger": ["World zone line."]}, "generic": ["World generic."]},
        emergency_fallback="The world holds its breath.",
    )
    profile = guard_profile(fallbacks={"by_trigger": {"player_utterance": ["A", "B", "C"]}, "generic": ["NPC generic."]})
    assert choose_fallback(profile, world, TriggerReason.PLAYER_UTTERANCE, 4).text == "B"
    assert choose_fallback(profile, world, TriggerReason.ZONE_TRIGGER, 0).source == "world_trigger"
    assert choose_fallback(profile, world, TriggerReason.TIME_TRIGGER, 0).text == "NPC generic."
    bare = guard_profile()
    assert choose_fallback(bare, world, TriggerReason.TIME_TRIGGER, 0).text == "World generic."
    assert choose_fallback(bare, eldmoor_world(emergency_fallback="Silence."), TriggerReason.CUSTOM, 0).text == "Silence."
    assert choose_fallback(bare, None, TriggerReason.CUSTOM, 0).source == "emergency"


def test_judge_off_by_default_and_keyword_fallback(tmp_path: Path) -> None:
    profile = rich_guard_profile(
        rules=[
            {"id": "no_war", "type": "prohibition", "severity": "soft", "prompt_injection": "discuss the northern war campaign"}
        ]
    )
    text = say("The northern campaign was bloody.")
    off, _ = make_pipeline(tmp_path / "a.sqlite", [text], profile=profile)
    assert off.interact(ask("What of the war?")).attempts == 1

    on, backend = make_pipeline(
        tmp_path / "b.sqlite",
        [text, say("I'd rather not say.")],
        profile=profile,
        config=PipelineConfig(gate=GateConfig(semantic_judge=True)),
    )
    result = on.interact(ask("What of the war?"))  # no judge model: keyword fallback flags it
    assert result.attempts == 2 and result.failed_gates == ("semantic",)
    assert "keyword judge" in result.receipt.attempts[0].failures[0].reason


def test_judge_model_verdict(tmp_path: Path) -> None:
    profile = rich_guard_profile(
        rules=[{"id": "no_war", "type": "prohibition", "severity": "soft", "prompt_injection": "discuss the war"}]
    )
    pipeline, _ = make_pipeline(
        tmp_path / "c.sqlite",
        [say("Battles, blood, banners.")],
        profile=profile,
        config=PipelineConfig(gate=GateConfig(semantic_judge=True)),
    )
    judge = ScriptedBackend(judge_outputs=['{"violated": ["no_war", "unknown_rule"]}', '{"violated": []}'])
    pipeline.judge.backend = judge
    pipeline.backend.extend([say("Peace and bread.")])
    result = pipeline.interact(ask("Tell me of battles"))
    assert result.attempts == 2
    assert result.receipt.attempts[0].failures[0].reason == "judge: breaks no_war"
    assert [r.purpose for r in judge.requests] == ["judge", "judge"]


def test_the_judge_is_not_asked_once_a_hard_rule_failed_the_attempt(tmp_path: Path) -> None:
    profile = rich_guard_profile(
        rules=[
            {"id": "no_war", "type": "prohibition", "severity": "soft", "prompt_injection": "discuss the war"},
            {"id": "no_dragon", "type": "prohibition", "severity": "hard", "checks": {"forbidden_phrases": ["dragon"]}},
        ]
    )
    pipeline, _ = make_pipeline(
        tmp_path / "d.sqlite",
        [say("A dragon burned the war camp."), say("Peace and bread.")],
        profile=profile,
        config=PipelineConfig(gate=GateConfig(semantic_judge=True)),
    )
    judge = ScriptedBackend(judge_outputs=['{"violated": []}'])
    pipeline.judge.backend = judge
    result = pipeline.interact(ask("Tell me of battles"))
    first, second = result.receipt.attempts
    (skipped,) = [c for c in first.gates if c.gate.value == "semantic"]
    assert skipped.skipped == "a hard rule already failed this attempt" and skipped.passed
    assert [c.skipped for c in second.gates if c.gate.value == "semantic"] == [None]  # asked on the clean attempt
    assert len(judge.requests) == 1


def test_a_judge_model_past_its_timeout_gives_way_to_the_keyword_check(tmp_path: Path) -> None:
    from loreguard.server.pipeline.inference import BackendTimeout

    class LateJudge(ScriptedBackend):
        def generate(self, request):  # noqa: ANN001, ANN202
            self.requests.append(request)
            raise BackendTimeout(f"no verdict within {request.timeout_ms} ms")

    profile = rich_guard_profile(
        rules=[
            {"id": "no_war", "type": "prohibition", "severity": "soft", "prompt_injection": "discuss the northern war campaign"}
        ]
    )
    pipeline, _ = make_pipeline(
        tmp_path / "e.sqlite",
        [say("The northern campaign was bloody."), say("I'd rather not say.")],
        profile=profile,
        config=PipelineConfig(gate=GateConfig(semantic_judge=True), judge_timeout_ms=250),
    )
    late = LateJudge([])
    pipeline.judge.backend = late
    result = pipeline.interact(ask("What of the war?"))
    assert "keyword judge" in result.receipt.attempts[0].failures[0].reason
    assert late.requests[0].timeout_ms == 250 and pipeline.judge.timeouts == 2
