"""Retry escalation and repair, fallback order, the semantic judge with its keyword fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile, rich_guard_profile, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import Constraint, GateFailure, GateName, RuleChecks, RuleType, Severity, TriggerReason
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import PipelineConfig
from loreguard.server.pipeline.errors import ConstraintIdCollision
from loreguard.server.pipeline.expectancy import ConstraintSet
from loreguard.server.pipeline.fallback import choose_fallback
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.retry import EscalationMode, escalate, repair_message, retry_rule_id

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
    assert [i for i in added.ids() if i.startswith("retry.")] == [retry_rule_id(FAILURES[1])]
    assert retry_rule_id(FAILURES[1]).startswith("retry.no_orcs.")  # never the secret's
    full = escalate(BASE, FAILURES, EscalationMode.FULL)
    assert {retry_rule_id(FAILURES[1]), "greet"} <= set(full.ids())
    assert full.to_prompt_injection().count("IMPORTANT") == 2


def _forbidden(rule_id: str, evidence: str, gate: GateName = GateName.CONSTRAINTS) -> GateFailure:
    return GateFailure(
        gate=gate, reason=f'forbidden phrase "{evidence}"', severity=Severity.HARD, rule_id=rule_id, evidence=evidence
    )


def test_every_failure_of_an_attempt_escalates_to_a_prohibition_of_its_own() -> None:
    failures = [
        _forbidden("no_beasts", "dragon"),
        _forbidden("no_beasts", "wyvern"),  # two phrases of one rule
        _forbidden("gate.state", "the gate is open", GateName.CANONICAL),
        _forbidden("gate.state", "the gate is not shut", GateName.CANONICAL),  # two claims about one fact
        _forbidden("gate.state", "the gate is open"),  # same rule id and evidence, another gate
    ]
    escalated = escalate(BASE, failures, EscalationMode.ADD_SPECIFIC_PROHIBITION)
    added = [c for c in escalated.constraints if c.rule_id.startswith("retry.")]
    assert len(added) == len({retry_rule_id(f) for f in failures}) == 5
    injection = escalated.to_prompt_injection()
    for evidence in ("dragon", "wyvern", "the gate is open", "the gate is not shut"):
        assert f'say "{evidence}" or anything like it' in injection
    message = repair_message(failures)
    assert all(f.reason in message for f in failures) and message.count("\n- ") == 5


def test_retry_rule_ids_are_stable_valid_identifiers_and_a_repeated_failure_is_said_once() -> None:
    failure = _forbidden("world_state:" + "k" * 120, "x")  # a free-text rule id, far longer than an Identifier
    assert retry_rule_id(failure) == retry_rule_id(failure.model_copy())
    assert len(retry_rule_id(failure)) <= 64
    Constraint(rule_id=retry_rule_id(failure), type=RuleType.PROHIBITION, severity=Severity.HARD, text="t", checks=RuleChecks())
    once = escalate(BASE, [failure], EscalationMode.ADD_SPECIFIC_PROHIBITION)
    twice = escalate(once, [failure, failure], EscalationMode.ADD_SPECIFIC_PROHIBITION)
    assert twice.ids() == once.ids()


def test_a_constraint_set_refuses_two_different_rules_with_one_id() -> None:
    strict = Constraint(
        rule_id="no_orcs", type=RuleType.PROHIBITION, severity=Severity.CRITICAL, text="orcs", checks=RuleChecks()
    )
    lax = strict.model_copy(update={"severity": Severity.SOFT})
    with pytest.raises(ConstraintIdCollision, match="no_orcs"):
        ConstraintSet.of([lax, strict])
    with pytest.raises(ConstraintIdCollision):
        ConstraintSet.of([strict, lax])
    assert ConstraintSet.of([strict, strict]).ids() == ("no_orcs",)  # the same rule twice is one rule
    escalated = lax.model_copy(update={"escalation": 1})
    assert ConstraintSet.of([lax, escalated]).constraints == (escalated,)  # an escalated copy replaces it


def test_the_repair_attempt_is_told_every_failure_of_the_last_one(tmp_path: Path) -> None:
    profile = rich_guard_profile(
        rules=[
            {"id": "no_beasts", "type": "prohibition", "severity": "hard", "checks": {"forbidden_phrases": ["dragon", "wyvern"]}}
        ]
    )
    pipeline, backend = make_pipeline(
        tmp_path / "r.sqlite", [say("A dragon and a wyvern, both."), say("Quiet skies.")], profile=profile
    )
    result = pipeline.interact(ask("What flies over the hills?"))
    assert result.attempts == 2 and result.outcome.value == "validated"
    second = backend.requests[1].prompt.full
    assert 'say "dragon" or anything like it' in second and 'say "wyvern" or anything like it' in second
    assert 'forbidden phrase "dragon"' in second and 'forbidden phrase "wyvern"' in second


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
    assert choose_fallback(profile, world, TriggerReason.PLAYER_UTTERANCE, 1).text == "B"
    # one rotation through every line that applies, in fallback order
    rotation = [choose_fallback(profile, world, TriggerReason.PLAYER_UTTERANCE, n).text for n in range(6)]
    assert rotation == ["A", "B", "C", "NPC generic.", "World generic.", "A"]
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

    # look-alike letters do not hide the words from the keyword judge (the one normaliser)
    disguised = say("The n\u043erthern c\u0430mpaign was bloody.")
    again, _ = make_pipeline(
        tmp_path / "c.sqlite",
        [disguised, say("I'd rather not say.")],
        profile=profile,
        config=PipelineConfig(gate=GateConfig(semantic_judge=True)),
    )
    assert again.interact(ask("What of the war?")).failed_gates == ("semantic",)


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
    judge = ScriptedBackend(judge_outputs=['{"broken": ["no_war"]}', '{"broken": []}'])
    pipeline.judge.backend = judge
    pipeline.backend.extend([say("Peace and bread.")])
    result = pipeline.interact(ask("Tell me of battles"))
    assert result.attempts == 2
    assert result.receipt.attempts[0].failures[0].reason == "judge: breaks no_war (must never discuss the war)"
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
    judge = ScriptedBackend(judge_outputs=['{"broken": []}'])
    pipeline.judge.backend = judge
    result = pipeline.interact(ask("Tell me of battles"))
    first, second = result.receipt.attempts
    (skipped,) = [c for c in first.gates if c.gate.value == "semantic"]
    assert skipped.skipped == "a hard rule already failed this attempt" and skipped.passed
    assert [c.skipped for c in second.gates if c.gate.value == "semantic"] == [None]  # asked on the clean attempt
    assert len(judge.requests) == 1


def test_a_judge_model_past_its_timeout_gives_way_to_the_keyword_check(tmp_path: Path) -> None:
    from loreguard.server.inference import BackendTimeout

    class LateJudge(ScriptedBackend):
        def generate(self, request):
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


def test_a_generation_is_told_what_the_npc_said_before_oldest_first(tmp_path: Path) -> None:
    """`GenerationRequest.said_before`: the NPC's newest replies, then what this interaction's
    refused attempts wrote, so DRY keeps a retry from saying the refused line again."""
    profile = rich_guard_profile(
        rules=[{"id": "no_beasts", "type": "prohibition", "severity": "hard", "checks": {"forbidden_phrases": ["dragon"]}}]
    )
    lines = [say("The gate shuts at dusk."), say("Rain again, traveller."), say("A dragon, I swear it."), say("Quiet skies.")]
    pipeline, backend = make_pipeline(tmp_path / "s.sqlite", lines, profile=profile)
    for question in ("When does the gate shut?", "How is the weather?", "What flies over the hills?"):
        pipeline.interact(ask(question))
    first, retry = backend.requests[2], backend.requests[3]
    assert first.said_before == ("The gate shuts at dusk.", "Rain again, traveller.")
    assert retry.said_before == ("The gate shuts at dusk.", "Rain again, traveller.", "A dragon, I swear it.")
    assert backend.requests[0].said_before == ()  # nothing said yet
