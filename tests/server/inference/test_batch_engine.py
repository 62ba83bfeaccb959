"""The batched engine with the real embedded model: reuse, many NPCs at once, limits, reproducibility."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask
from stores import open_store

from loreguard.client import AsyncClient
from loreguard.schemas import InteractionOutcome, ParsedOutput
from loreguard.server.bench.sidecar import load_npcs
from loreguard.server.demo import demo_world
from loreguard.server.inference import BackendError
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

pytestmark = pytest.mark.model


def test_a_repeat_turn_evaluates_only_what_changed(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    recording = Recording(llama_backend)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
    pipeline.interact(ask("Good evening.", npc="guard"))
    pipeline.interact(ask("Good evening.", npc="merchant"))  # another NPC's turn in between
    mark = len(recording.calls)
    pipeline.interact(ask("When does the gate close?", npc="guard"))

    request, again = recording.calls[mark]
    tokens = llama_backend.tokenize_prompt(request.prompt)
    # Everything up to the guard's new conversation line came from its previous turn's sequence.
    assert again.tokens_cached > len(tokens.prefix)
    assert again.tokens_evaluated < len(tokens.suffix)
    assert again.tokens_cached + again.tokens_evaluated == len(tokens.prefix) + len(tokens.suffix)


def test_npcs_asking_at_once_are_decoded_in_the_same_steps(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    npcs = load_npcs(4)
    store = open_store(tmp_path / "memory.sqlite", world=demo_world(), npcs=npcs)
    recording = Recording(llama_backend)
    peak_before = llama_backend.engine.stats.peak_decoding if llama_backend.engine else 0
    sidecar = Sidecar(store, recording, SidecarConfig(port=0, request_timeout_ms=600_000))
    assert sidecar.worker.workers == llama_backend.config.parallel == 4
    sidecar.start()
    try:

        async def scenario():
            async with AsyncClient(sidecar.address, timeout_s=600) as client:
                return await asyncio.gather(*(client.interact(p.id, "Who goes there?") for p in npcs))

        results = asyncio.run(scenario())
    finally:
        sidecar.stop()
    assert [r.npc_id for r in results] == [p.id for p in npcs]
    assert all(r.dialogue and r.audit_record_id for r in results)
    assert all(r.outcome in (InteractionOutcome.VALIDATED, InteractionOutcome.FALLBACK) for r in results)
    for _, generation in recording.calls:
        assert generation.finish_reason == "stop", generation.text
        ParsedOutput.model_validate_json(generation.text)
    assert llama_backend.engine is not None
    assert max(peak_before, llama_backend.engine.stats.peak_decoding) >= 2  # generations shared decode steps


def test_a_full_kv_cache_drops_resident_sequences_and_still_answers(tmp_path: Path) -> None:
    # Room for one generation's context (3,072 tokens: a second turn's prompt of about 900 plus
    # the output schema's longest answer, about 1,930) and no more: five NPCs' turns of about 750
    # tokens each overflow it.
    budget = -(-3072 * 23040 // 2**20)
    backend = LlamaCppBackend(LlamaCppConfig(n_ctx=3072, kv_budget_mib=budget, n_threads=2, parallel=1))
    try:
        npcs = load_npcs(5)
        store = open_store(tmp_path / "m.sqlite", world=demo_world(), npcs=npcs)
        recording = Recording(backend)
        pipeline = GovernancePipeline(store, recording)
        results = [pipeline.interact(ask("Hello.", npc=p.id)) for p in npcs]
        assert all(r.dialogue for r in results)
        assert {g.npc_id for g, _ in recording.calls} == {p.id for p in npcs}  # the model answered every NPC
        assert all(g.finish_reason == "stop" for _, g in recording.calls)
        engine = backend.engine
        assert engine is not None and engine.stats.kv_full_evictions >= 1
        assert engine.stats.kv_full_failures == 0
        assert engine.spill is not None and engine.spill.owners()  # an evicted turn was saved to host memory
        spilled_npc = engine.spill.owners()[0]

        # That NPC's next turn copies the saved state back instead of evaluating its prompt again.
        mark = len(recording.calls)
        assert pipeline.interact(ask("Hello again.", npc=spilled_npc)).dialogue
        again = recording.calls[mark][1]
        assert engine.stats.prompt_tokens_restored > 0
        assert again.tokens_cached >= engine.stats.prompt_tokens_restored > again.tokens_evaluated
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"kv_budget_mib": 16}, "raise kv_budget_mib to at least"),
        ({"kv_budget_mib": 1 << 30}, "more than half of this machine's"),
    ],
)
def test_a_budget_the_machine_cannot_serve_is_refused_at_start(config: dict[str, int], message: str) -> None:
    with pytest.raises(BackendError, match=message):
        LlamaCppBackend(LlamaCppConfig(**config))


def test_slots_beyond_llama_cpp_are_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="parallel"):
        LlamaCppConfig(parallel=1000)


def test_the_reproducible_engine_ignores_what_else_is_running(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    recording = Recording(reproducible_backend)
    GovernancePipeline(demo_store(tmp_path / "a.sqlite"), recording).interact(ask("Tell me a rumour.", npc="guard"))
    GovernancePipeline(demo_store(tmp_path / "b.sqlite"), recording).interact(ask("Tell me a rumour.", npc="merchant"))
    guard, merchant = recording.calls[0][0], recording.calls[-1][0]
    reproducible_backend.invalidate("guard")
    alone = reproducible_backend.generate(guard).text

    texts: list[str] = []
    others = [threading.Thread(target=reproducible_backend.generate, args=(merchant,)) for _ in range(2)]
    for thread in others:
        thread.start()
    texts.append(reproducible_backend.generate(guard).text)
    for thread in others:
        thread.join()
    assert texts == [alone]
    assert reproducible_backend.max_concurrency == 1
    assert reproducible_backend.fingerprint().extra["engine"] == "reproducible"


@pytest.mark.parametrize("engine", ["llama_backend", "reproducible_backend"])
def test_a_generation_past_its_timeout_stops_and_frees_its_slot(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from loreguard.server.inference import BackendTimeout

    backend: LlamaCppBackend = request.getfixturevalue(engine)
    recording = Recording(backend)
    GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording).interact(ask("Any news?", npc="guard"))
    asked = recording.calls[0][0]
    with pytest.raises(BackendTimeout, match="deadline"):
        backend.generate(asked.model_copy(update={"timeout_ms": 1}))
    assert backend.generate(asked).finish_reason == "stop"
