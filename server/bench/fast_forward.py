"""`loreguard bench fast-forward`: the grammar's forced tokens written in one step, against one
step each, on the same requests.

The governance pipeline runs `bench quality`'s player lines once (fast-forward on) and keeps each
line's first model request. Every request is then generated again with fast-forward on and off,
alternated request by request (on, off; then off, on), on the sidecar's engine (batched, one
slot on a CPU), so both see the same machine and the same cached prompt: each request is first
generated once untimed, so both timed runs find its whole prompt in the cache, as a game's line
finds its conversation so far. A generation's time runs from the request to its last token
(`line_s`); its decode time from its first token to its last (`decode_s`).

Figures: `line_s_p50_on`/`_off` and their ratio `on_over_off` (the goal is 0.85 or below),
`decode_s_p50_on`/`_off` and `decode_on_over_off`,
`decode_calls_per_line_on`/`_off` (model calls per generation: its prompt chunks and one per output
step) and their ratio, `forced_token_share` (of the output tokens, those the grammar forced) and
`same_text_rate` (generations whose text is the same either way: the sampler's random stream is
only asked for sampled tokens, so the text after a forced run may differ).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionContext
from loreguard.server.bench.quality import QUALITY_LINES
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.recording import RecordingBackend
from loreguard.server.pipeline import GovernancePipeline


def _requests(backend: LlamaCppBackend, lines: tuple[tuple[str, str], ...], folder: Path) -> list[GenerationRequest]:
    """Each player line's first model request, as the pipeline asks it."""
    store = MemoryStore(folder / "ff.sqlite")
    store.load_world(demo_world())
    for profile in demo_npcs():
        store.register_npc(profile)
    recording = RecordingBackend(backend)
    pipeline = GovernancePipeline(store, recording)
    requests = []
    for npc_id, line in lines:
        before = len(recording.calls)
        pipeline.interact(InteractionContext(npc_id=npc_id, trigger_reason="player_utterance", player_input=line))
        requests.append(recording.calls[before][0])
    store.close()
    return requests


def _timed(backend: LlamaCppBackend, request: GenerationRequest, *, on: bool) -> tuple[float, Generation, int, int]:
    backend.fast_forward = on
    calls, forced = backend.stats.decode_calls, backend.stats.tokens_forced
    started = time.perf_counter()
    generation = backend.generate(request)
    seconds = time.perf_counter() - started
    return seconds, generation, backend.stats.decode_calls - calls, backend.stats.tokens_forced - forced


def bench_fast_forward(
    *, lines: int | None = None, model: str | None = None, threads: int | None = None, gpu_layers: int = 0,
    device: str = "auto", model_settings: dict[str, object] | None = None,
) -> dict[str, object]:  # fmt: skip
    chosen = QUALITY_LINES[: max(1, lines)] if lines is not None else QUALITY_LINES
    config = LlamaCppConfig(
        model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, device=device,
        **(model_settings or {}),
    )  # fmt: skip
    seconds: dict[bool, list[float]] = {True: [], False: []}
    decoding: dict[bool, list[float]] = {True: [], False: []}
    calls: dict[bool, list[int]] = {True: [], False: []}
    generated = forced = same = 0
    with tempfile.TemporaryDirectory() as tmp, LlamaCppBackend(config) as backend:
        requests = _requests(backend, chosen, Path(tmp))
        for i, request in enumerate(requests):
            texts = {}
            _timed(backend, request, on=True)  # untimed: the prompt evaluated, for both runs alike
            for on in (True, False) if i % 2 == 0 else (False, True):
                s, generation, n_calls, n_forced = _timed(backend, request, on=on)
                seconds[on].append(s)
                decoding[on].append(max(0.0, generation.total_ms - generation.ttft_ms) / 1000)
                calls[on].append(n_calls)
                texts[on] = generation.text
                if on:
                    generated, forced = generated + generation.tokens_generated, forced + n_forced
            same += texts[True] == texts[False]
            print(f"[{i + 1}/{len(requests)}] on {seconds[True][-1]:.2f} s, off {seconds[False][-1]:.2f} s: {texts[True]}",
                  file=sys.stderr, flush=True)  # fmt: skip
    on_s, off_s = statistics.median(seconds[True]), statistics.median(seconds[False])
    on_calls, off_calls = statistics.mean(calls[True]), statistics.mean(calls[False])
    return {
        "lines": len(chosen),
        "line_s_p50_on": round(on_s, 3),
        "line_s_p50_off": round(off_s, 3),
        "on_over_off": round(on_s / off_s, 3) if off_s else 0.0,
        "decode_s_p50_on": round(statistics.median(decoding[True]), 3),
        "decode_s_p50_off": round(statistics.median(decoding[False]), 3),
        "decode_on_over_off": round(statistics.median(decoding[True]) / statistics.median(decoding[False]), 3)
        if statistics.median(decoding[False])
        else 0.0,
        "decode_calls_per_line_on": round(on_calls, 1),
        "decode_calls_per_line_off": round(off_calls, 1),
        "decode_calls_on_over_off": round(on_calls / off_calls, 3) if off_calls else 0.0,
        "forced_token_share": round(forced / generated, 3) if generated else 0.0,
        "same_text_rate": round(same / len(chosen), 3),
    }
