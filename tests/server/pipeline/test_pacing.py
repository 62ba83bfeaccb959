"""Time for a second try (issue 57): on a slow backend, a first attempt is bounded so that a
repair still fits the time left; the bound is in the output grammar, on the receipt, and replayed."""

from __future__ import annotations

from pathlib import Path

from factories import say
from pipeline_helpers import ask
from stores import demo_store

from loreguard.schemas import InteractionOutcome
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit.recorder import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import Generation, ScriptedBackend
from loreguard.server.inference.recording import RecordingBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.retry import RetryPolicy
from loreguard.server.pipeline.running.pacing import MIN_DIALOGUE_CHARS, DecodeSpeed, first_attempt_chars


def test_the_bound_leaves_half_the_time_left_for_a_repair() -> None:
    assert first_attempt_chars(30_000, None, 160) == 160  # no speed measured yet: no bound
    assert first_attempt_chars(float("inf"), 8.0, 160) == 160  # no time limit
    assert first_attempt_chars(120_000, 8.0, 160) == 160  # two whole replies fit
    # 12 s left at 8 tokens/s: 48 tokens for the first attempt, 30 of them the JSON around the line
    assert first_attempt_chars(12_000, 8.0, 160) == (48 - 30) * 4
    assert first_attempt_chars(2_000, 8.0, 160) == MIN_DIALOGUE_CHARS  # never shorter than an answer


def test_the_speed_is_the_median_of_timed_generations() -> None:
    speed = DecodeSpeed()
    speed.observe(Generation(text="", tokens_generated=3, total_ms=1000.0))  # too few tokens to time
    assert speed.tokens_per_s() is None
    for tokens in (40, 80, 400):
        speed.observe(Generation(text="", tokens_generated=tokens, total_ms=10_500.0, ttft_ms=500.0))
    assert speed.tokens_per_s() == 8.0


def test_a_slow_backend_bounds_the_first_attempt_and_a_replay_keeps_the_bound(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "m.sqlite")
    backend = RecordingBackend(ScriptedBackend({"guard": [say("Aye."), say("The gate is shut, traveller.")]}))
    config = PipelineConfig(retry=RetryPolicy(time_budget_ms=12_000))
    pipeline = GovernancePipeline(store, backend, config, recorder=AuditRecorder(store, fingerprint=None))
    # what the backend's earlier lines took: 8 tokens a second
    pipeline.time_decisions.observe(Generation(text="", tokens_generated=80, total_ms=10_000.0))  # type: ignore[attr-defined]
    pipeline.interact(ask("Any news from the hills?", npc="guard"))
    result = pipeline.interact(ask("Is the gate open?", npc="guard"))

    assert result.outcome is InteractionOutcome.VALIDATED
    [attempt] = result.receipt.attempts
    assert attempt.dialogue_chars is not None and MIN_DIALOGUE_CHARS <= attempt.dialogue_chars < 160
    request = backend.calls[-1][0]
    assert request.output_schema is not None
    assert request.output_schema["properties"]["dialogue"]["maxLength"] == attempt.dialogue_chars

    assert pipeline.recorder is not None
    report = Replayer(pipeline.recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (2, 0)
