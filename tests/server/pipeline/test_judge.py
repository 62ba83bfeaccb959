"""The semantic judge in the NPC's own sequence (issue 31): its decisions with a scripted judge,
its mechanics with the real model (a verdict parsed, the KV reused, a timeout giving way)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store

from loreguard.schemas import InteractionOutcome
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit.recorder import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import BackendTimeout, ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.running.judge import JUDGE_HEADING

JUDGED = PipelineConfig(gate=GateConfig(semantic_judge=True))
#: A paraphrase no deterministic check catches: the gate "shuts at sundown" is not "at dusk"'s cue.
PARAPHRASE = "Sundown? No, friend. We keep it open until the small hours now."
FRESH = "The gate closes at dusk, traveller. Come back at first light."


def _pipeline(tmp_path: Path, outputs: list[str], verdicts: list[str], recorder: bool = False) -> GovernancePipeline:
    store = demo_store(tmp_path / "m.sqlite")
    backend = ScriptedBackend({"guard": outputs}, judge_outputs=verdicts)
    audit = AuditRecorder(store, fingerprint=None) if recorder else None
    return GovernancePipeline(store, backend, JUDGED, recorder=audit, judge_backend=backend)


def test_a_verdict_naming_a_fact_fails_the_attempt_and_the_retry_is_told_which(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, [say(PARAPHRASE), say(FRESH)], ['{"broken": ["canonical:gate_hours"]}', '{"broken": []}'])
    result = pipeline.interact(ask("When does the gate close?", scene="eldmoor"))
    first, second = result.receipt.attempts
    (failure,) = first.failures
    assert (failure.gate.value, failure.rule_id, failure.severity.value) == ("semantic", "canonical:gate_hours", "hard")
    assert "The north gate closes at dusk." in failure.reason
    assert first.judge is not None and first.judge.broken == ("canonical:gate_hours",)
    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == FRESH
    retry = pipeline.backend.requests[2].prompt.player_turn  # type: ignore[attr-defined]
    assert "canonical:gate_hours" in retry


def test_the_judge_asks_in_the_npcs_own_conversation(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path, [say(FRESH)], ['{"broken": []}'])
    pipeline.interact(ask("When does the gate close?", scene="eldmoor"))
    dialogue, judge = pipeline.backend.requests  # type: ignore[attr-defined]
    asked = judge.prompt.messages()
    assert asked[:-2] == dialogue.prompt.messages()  # the same conversation, byte for byte
    assert asked[-2] == {"role": "assistant", "content": say(FRESH)}  # the reply, as written
    question = asked[-1]["content"]
    assert question.startswith(JUDGE_HEADING) and judge.purpose == "judge"
    assert "- canonical:gate_hours: The north gate closes at dusk." in question
    assert "- secret:password: reveals the gate password" in question
    assert "silver moon" not in question  # a secret by its topic, never its text
    enum = judge.output_schema["properties"]["broken"]["items"]["enum"]
    assert {"canonical:king", "secret:password", "no_dragon", "no_modern"} <= set(enum)


@pytest.mark.parametrize(
    ("verdict", "outcome"),
    [('{"broken": ["not_an_id"]}', "unparsable"), ("I think it is fine.", "unparsable"), (None, "timeout")],
)
def test_no_verdict_never_blocks_a_line_the_deterministic_checks_pass(tmp_path: Path, verdict: str | None, outcome: str) -> None:
    class Judge(ScriptedBackend):
        def generate(self, request: GenerationRequest) -> Generation:
            if request.purpose == "judge" and verdict is None:
                raise BackendTimeout("no verdict in time")
            return super().generate(request)

    store = demo_store(tmp_path / "m.sqlite")
    backend = Judge({"guard": [say(FRESH)]}, judge_outputs=[verdict or ""])
    pipeline = GovernancePipeline(store, backend, JUDGED, judge_backend=backend)
    result = pipeline.interact(ask("When does the gate close?", scene="eldmoor"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 1
    (attempt,) = result.receipt.attempts
    assert attempt.judge is not None and attempt.judge.outcome == outcome
    (semantic,) = [c for c in attempt.gates if c.gate.value == "semantic"]
    assert semantic.passed and semantic.note is not None and "deterministic checks decided" in semantic.note


def test_a_judged_session_replays_exactly(tmp_path: Path) -> None:
    pipeline = _pipeline(
        tmp_path, [say(PARAPHRASE), say(FRESH)], ['{"broken": ["canonical:gate_hours"]}', '{"broken": []}'], recorder=True
    )
    pipeline.interact(ask("When does the gate close?", scene="eldmoor"))
    assert pipeline.recorder is not None
    report = Replayer(pipeline.recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0)


# --- the real model -----------------------------------------------------------------------------


@pytest.mark.model
def test_the_real_model_judges_in_its_own_kv_sequence(tmp_path: Path, llama_backend) -> None:
    """A verdict in grammar; the NPC's prompt and most of its reply come from the cache, so the
    judge's question is most of what it evaluates; a judge past its time gives way."""
    store = demo_store(tmp_path / "m.sqlite")
    # A generous judge deadline: this test is about the verdict and the cache, and a loaded CI
    # machine once took past the default 3 s (the 1 ms judge below is the one that must give way).
    config = JUDGED.model_copy(update={"judge_timeout_ms": 120_000})
    pipeline = GovernancePipeline(store, llama_backend, config, judge_backend=llama_backend)
    # The judge is asked only about a reply every deterministic gate passed: with the embedded
    # model a line's three attempts can all fail a hard rule first, so ask until one gets there.
    judge = None
    for line in ("When does the gate close?", "Who are you?", "Is the road north safe?", "Good evening, guard."):
        result = pipeline.interact(ask(line, scene="eldmoor"))
        first = result.receipt.attempts[0]
        judge = next((a.judge for a in result.receipt.attempts if a.judge is not None), None)
        if judge is not None:
            break
    assert judge is not None, "no reply of four lines passed the deterministic gates"
    assert judge.outcome == "verdict", judge
    # the record keeps the verdict as a sorted set, whatever order the model named the rules in
    assert sorted(set(json.loads(judge.raw)["broken"])) == list(judge.broken)
    prompt_tokens = first.tokens_evaluated  # the dialogue's prompt, all of it now in the sequence
    assert judge.tokens_cached >= prompt_tokens > 0, judge
    assert judge.tokens_evaluated < judge.tokens_cached, judge

    # the same judge, given 1 ms: its model times out and the deterministic checks decide
    scripted = ScriptedBackend({"guard": [say(FRESH)]})
    impatient = GovernancePipeline(
        demo_store(tmp_path / "t.sqlite"),
        scripted,
        PipelineConfig(gate=GateConfig(semantic_judge=True), judge_timeout_ms=1),
        judge_backend=llama_backend,
    )
    late = impatient.interact(ask("When does the gate close?", scene="eldmoor"))
    (attempt,) = late.receipt.attempts
    assert late.outcome is InteractionOutcome.VALIDATED and late.dialogue == FRESH
    assert attempt.judge is not None and attempt.judge.outcome == "timeout"
    (semantic,) = [c for c in attempt.gates if c.gate.value == "semantic"]
    assert semantic.note is not None and "deterministic checks decided" in semantic.note
