"""`loreguard bench sampling`: the host's work for each sampled token, at 1, 8 and 32 rows a step.

N generations of the demo merchant's real prompt under its real output grammar (the request the
pipeline sends for "I'd like a lantern, please.", each copy with its own seed) decode together on
the batched engine with N slots. The engine times each step, its `llama_decode` and its
`sample_rows` (penalties, shortlists, draws, the grammar's check of each drawn token, and masks
for the rows it refused), so per N it prints:

- `host_us_per_row_N`: host time per sampled row, and its two parts `choose_us_per_row_N` and
  `masks_us_per_row_N` (the masks' time spread over every row);
- `masked_row_share_N`: the share of rows whose drawn token the grammar refused, which needed a mask;
- `decode_ms_per_step_N`: the mean `llama_decode` of a step (on a GPU, the wait for the logits too);
- `outside_decode_share_N`: the share of step time the host spent on its own work (batch
  building, masks, sampling), which on a GPU leaves the device idle;
- `schema_valid_N`: the share of outputs that parse as the output schema (must be 1.0).

This machine's figures are the CPU's: `llama_decode` dwarfs the host work there. The host work
per row is the same on a GPU host, where a step of 8 rows takes a few milliseconds.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionContext
from loreguard.server.bench.inference import strictly_valid
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference.base import GenerationRequest
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.recording import RecordingBackend
from loreguard.server.pipeline import GovernancePipeline

_LINE = "I'd like a lantern, please."


def merchant_request(backend: LlamaCppBackend) -> GenerationRequest:
    """The first dialogue request the pipeline sends the demo merchant for `_LINE`."""
    recorder = RecordingBackend(backend)
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "bench.sqlite")
        store.load_world(demo_world())
        for profile in demo_npcs():
            store.register_npc(profile)
        GovernancePipeline(store, recorder).interact(
            InteractionContext(npc_id="merchant", trigger_reason="player_utterance", player_input=_LINE)
        )
        store.close()
    return next(request for request, _ in recorder.calls if request.purpose == "dialogue")


def _together(backend: LlamaCppBackend, request: GenerationRequest, n: int) -> float:
    """N copies of `request` (seeds 0..N-1) generated at once; the share that parse."""
    texts: list[str] = [""] * n

    def one(i: int) -> None:
        texts[i] = backend.generate(request.model_copy(update={"seed": i, "npc_id": f"row_{i}"})).text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(strictly_valid(text) for text in texts) / n


def bench_sampling(
    *,
    rows: tuple[int, ...] = (1, 8, 32),
    model: str | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    device: str = "auto",
) -> dict[str, object]:
    figures: dict[str, object] = {}
    for n in rows:
        config = LlamaCppConfig(
            model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, device=device, parallel=n, prefix_cache_bytes=0
        )
        with LlamaCppBackend(config) as backend:
            request = merchant_request(backend)
            engine = backend.engine
            assert engine is not None, "the batched engine (reproducible=False)"
            _together(backend, request, n)  # the first round evaluates the prompt: not timed
            engine.stats = type(engine.stats)()
            valid = _together(backend, request, n)
            stats = engine.stats
            sampled = max(1, stats.sampling.rows)
            figures[f"host_us_per_row_{n}"] = round(stats.sampling.host_s / sampled * 1e6, 1)
            figures[f"masks_us_per_row_{n}"] = round(stats.sampling.masks_s / sampled * 1e6, 1)
            figures[f"choose_us_per_row_{n}"] = round(stats.sampling.choose_s / sampled * 1e6, 1)
            figures[f"masked_row_share_{n}"] = round(stats.sampling.masked_rows / sampled, 4)
            figures[f"decode_ms_per_step_{n}"] = round((stats.decode_s + stats.sampling.logits_s) / max(1, stats.steps) * 1e3, 2)
            figures[f"outside_decode_share_{n}"] = round(stats.outside_decode_share, 4)
            figures[f"rows_per_step_{n}"] = round(stats.sampling.rows / max(1, stats.steps), 2)
            figures[f"schema_valid_{n}"] = round(valid, 3)
    return figures
