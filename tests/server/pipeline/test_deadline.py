"""An interaction's deadline against a slow model: the generation in flight is cut a margin before
it, the NPC's fallback line (or the words a stream already released) is the answer, nothing of the
cut generation is applied, and the record replays to the same decision. Real clock, scripted model
whose latency the cut interrupts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from factories import ramble, say
from model_helpers import demo_store

from loreguard.schemas import InteractionContext, InteractionOutcome
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import BackendTimeout, ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest, Observer
from loreguard.server.pipeline import DeadlineExceeded, GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.running.streaming import StreamSession

#: How late past its deadline an answer may come on a loaded machine (the commit and the checks).
LATE_S = 0.5


def _news() -> InteractionContext:
    return InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="Any news?")


def _replays_exactly(recorder: AuditRecorder) -> None:
    report = Replayer(recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (report.total, 0), [r.details for r in report.results]


class SlowAfterFirst(ScriptedBackend):
    """The first generation answers at once; every later one takes `latency_s`."""

    def generate(self, request: GenerationRequest) -> Generation:
        generation = super().generate(request)
        self.latency_s = 30.0
        return generation


def test_a_slow_generation_is_cut_at_the_deadline_and_the_fallback_line_answers(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    backend = ScriptedBackend([say("The dragon sleeps, traveller.")], latency_s=30.0)
    pipeline = GovernancePipeline(store, backend, recorder=recorder)
    started = time.perf_counter_ns()
    result = pipeline.interact(_news(), deadline_ns=started + 1_500_000_000)
    took_s = (time.perf_counter_ns() - started) / 1e9
    assert took_s < 1.5 + LATE_S
    assert result.outcome is InteractionOutcome.FALLBACK
    assert result.dialogue == "Move along, traveller."
    assert result.receipt.fallback_reason == "time_budget -> npc_trigger"
    assert result.receipt.attempts == () and result.receipt.backend_failure is None
    # what any fallback applies: the interaction counts, no exchange is remembered
    assert store.interactions("guard") == 1 and not store.scope("guard").episodic
    assert pipeline.counters["deadline_cut"] == 1
    # the model was asked with the time left to the cut, not an unrelated limit
    (asked,) = backend.requests
    assert asked.timeout_ms is not None and asked.timeout_ms <= 1500 - 250
    _replays_exactly(recorder)


def test_a_retry_the_deadline_cuts_ends_in_the_fallback_and_replays(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    # a soft failure (too long) at once, then a retry that would take 30 s
    backend = SlowAfterFirst([say("Hello. " + ramble(320)), say("Dusk.")])
    pipeline = GovernancePipeline(store, backend, recorder=recorder)
    started = time.perf_counter_ns()
    result = pipeline.interact(_news(), deadline_ns=started + 1_500_000_000)
    assert (time.perf_counter_ns() - started) / 1e9 < 1.5 + LATE_S
    assert result.fallback_used and result.receipt.fallback_reason is not None
    assert result.receipt.fallback_reason.startswith("time_budget")
    assert len(result.receipt.attempts) == 1  # the cut retry is not an attempt of the record
    _replays_exactly(recorder)


class ReleasesThenStalls(ScriptedBackend):
    """Streams its line's first sentence, then stalls until the request's timeout cuts it."""

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        text = self.generate(request).text
        stall_at = text.index(". ") + 2
        for end in range(1, stall_at + 1):
            if not observe(text[:end]):
                return Generation(text=text[:end], finish_reason="aborted")
        assert request.timeout_ms is not None
        threading.Event().wait(request.timeout_ms / 1000)  # the model stalls past the cut
        raise BackendTimeout("the generation ran past its deadline after 9 tokens")


def test_a_stream_the_deadline_cuts_after_a_release_ends_at_the_released_words_and_replays(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    backend = ReleasesThenStalls([say("Halt there, traveller. The gate shuts at dusk. Go home.")])
    pipeline = GovernancePipeline(store, backend, recorder=recorder)
    chunks: list[str] = []
    started = time.perf_counter_ns()
    stream = StreamSession(emit=lambda chunk: chunks.append(chunk.text))
    result = pipeline.interact(_news(), deadline_ns=started + 1_500_000_000, stream=stream)
    assert (time.perf_counter_ns() - started) / 1e9 < 1.5 + LATE_S
    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == "Halt there, traveller."
    assert "".join(chunks) == result.dialogue  # words out stand; nothing is taken back
    cut = result.receipt.attempts[0].stream
    assert cut is not None and cut.cut is not None and "deadline" in cut.cut.reason
    _replays_exactly(recorder)


def test_a_deadline_past_before_the_first_attempt_raises_and_changes_nothing(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "memory.sqlite")
    backend = ScriptedBackend([say("Well met.")])
    pipeline = GovernancePipeline(store, backend)
    before = store.memory_hash()
    with pytest.raises(DeadlineExceeded):
        pipeline.interact(_news(), deadline_ns=time.perf_counter_ns() - 1)
    assert store.memory_hash() == before and backend.requests == []


def test_within_the_margin_no_attempt_starts(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "memory.sqlite")
    backend = ScriptedBackend([say("Well met.")])
    pipeline = GovernancePipeline(store, backend, PipelineConfig(deadline_margin_ms=60_000))
    result = pipeline.interact(_news(), deadline_ns=time.perf_counter_ns() + 30_000_000_000)
    assert result.fallback_used and result.receipt.fallback_reason == "time_budget -> npc_trigger"
    assert backend.requests == []


def test_the_judge_is_waited_for_no_longer_than_the_deadline_allows(tmp_path: Path) -> None:
    from loreguard.server.pipeline.gate import GateConfig

    store = demo_store(tmp_path / "memory.sqlite")
    judge = ScriptedBackend(judge_outputs=['{"broken": []}'])
    config = PipelineConfig(gate=GateConfig(semantic_judge=True), judge_timeout_ms=60_000)
    pipeline = GovernancePipeline(store, ScriptedBackend([say("Well met.")]), config, judge_backend=judge)
    result = pipeline.interact(_news(), deadline_ns=time.perf_counter_ns() + 20_000_000_000)
    assert result.outcome is InteractionOutcome.VALIDATED
    (asked,) = judge.requests
    assert asked.purpose == "judge" and asked.timeout_ms is not None and asked.timeout_ms <= 20_000 - 250
