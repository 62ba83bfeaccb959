"""The grammar's forced tokens decoded with the token before them, with the real embedded model:
fewer model calls for the same kind of line, the same text for the same seed every time, valid
output on both engines, and `bench fast-forward`'s figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loreguard.server.bench.fast_forward import _requests, bench_fast_forward
from loreguard.server.bench.quality import QUALITY_LINES
from loreguard.server.inference.llama_backend import LlamaCppBackend

pytestmark = pytest.mark.model


def test_forced_runs_take_fewer_model_calls_and_the_same_seed_writes_the_same_line(
    reproducible_backend: LlamaCppBackend, tmp_path: Path
) -> None:
    (request,) = _requests(reproducible_backend, QUALITY_LINES[:1], tmp_path)
    stats = reproducible_backend.stats
    try:
        runs = []
        for on in (True, True, False):
            reproducible_backend.fast_forward = on
            calls, forced = stats.decode_calls, stats.tokens_forced
            generation = reproducible_backend.generate(request)
            runs.append((generation, stats.decode_calls - calls, stats.tokens_forced - forced))
    finally:
        reproducible_backend.fast_forward = True
    (first, first_calls, first_forced), (again, _, _), (off, off_calls, off_forced) = runs
    assert first.text == again.text  # reproducible with fast-forward on
    assert off_forced == 0 and first_forced > first.tokens_generated / 4
    # One call for the prompt, one per sampled token but the last (the end, never decoded): the
    # forced ones ride along with the token before them.
    assert first_calls == first.tokens_generated - first_forced
    assert off_calls == off.tokens_generated
    for generation in (first, off):
        assert set(json.loads(generation.text)) >= {"dialogue", "intent"}


def test_the_batched_engine_writes_forced_runs_in_its_steps(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    requests = _requests(llama_backend, QUALITY_LINES[:2], tmp_path)
    engine = llama_backend.engine
    assert engine is not None
    before = engine.stats.tokens_forced
    for request in requests:
        generation = llama_backend.generate(request)
        assert set(json.loads(generation.text)) >= {"dialogue", "intent"}
    assert engine.stats.tokens_forced > before


@pytest.mark.slow
def test_bench_fast_forward_compares_on_and_off_on_the_same_requests() -> None:
    figures = bench_fast_forward(lines=2, threads=2)
    assert figures["forced_token_share"] > 0.2  # type: ignore[operator]
    assert figures["decode_calls_on_over_off"] < 0.8  # type: ignore[operator]
    assert figures["line_s_p50_on"] > 0 and figures["line_s_p50_off"] > 0  # type: ignore[operator]
