"""The deadline against the real embedded model: a generation longer than the deadline allows is
cut by the engine (either one), the NPC's fallback line answers in time, and the engine is free at
once for the next line."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask

from loreguard.schemas import InteractionOutcome
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.retry import RetryPolicy

pytestmark = pytest.mark.model

#: How late past its deadline an answer may come on a loaded machine (the commit and the checks).
LATE_S = 0.5
MARGIN_MS = 100
#: Each token of a slow machine's generation: the shortest line the output grammar admits is
#: some 20 tokens, so a generation takes a second at least, well past the cut.
TOKEN_S = 0.05


class SlowMachine(Recording):
    """The real model and engine, as slow as a busy machine: every token takes `TOKEN_S`."""

    def generate(self, request: GenerationRequest) -> Generation:
        pause = threading.Event()  # never set: an interruptible pause per token
        return self.inner.generate_streaming(request, lambda text: not pause.wait(TOKEN_S))


@pytest.mark.parametrize("engine", ["llama_backend", "reproducible_backend"])
def test_a_deadline_shorter_than_the_generation_cuts_it_and_the_fallback_answers(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    backend: LlamaCppBackend = request.getfixturevalue(engine)
    config = PipelineConfig(deadline_margin_ms=MARGIN_MS, retry=RetryPolicy(max_attempts=1))  # one generation a line
    pipeline = GovernancePipeline(demo_store(tmp_path / "memory.sqlite"), SlowMachine(backend), config)
    # warmed, as a game warms its NPCs: the reproducible engine cuts a prompt only between its
    # fixed chunks of prefill (the batched engine's caller stops waiting at once)
    backend.warm("guard", pipeline.warm_prompt("guard"))
    deadline_s = 0.4 + MARGIN_MS / 1000  # cut 0.4 s in
    started = time.perf_counter_ns()
    result = pipeline.interact(ask("Any news from the hills?", npc="guard"), deadline_ns=started + int(deadline_s * 1e9))
    assert (time.perf_counter_ns() - started) / 1e9 < deadline_s + LATE_S
    assert result.outcome is InteractionOutcome.FALLBACK and result.dialogue == "Move along, traveller."
    assert result.receipt.fallback_reason == "time_budget -> npc_trigger" and result.receipt.attempts == ()
    assert pipeline.counters["deadline_cut"] == 1

    # nothing of the cut generation holds the engine: the next line, at the model's own speed,
    # runs to its end
    pipeline.backend = backend
    after = pipeline.interact(ask("And the weather?", npc="guard"))
    assert after.receipt.attempts and after.receipt.attempts[0].tokens_generated > 0
