"""`loreguard bench concurrency`: many NPCs asking at once through the real sidecar.

In one run, on one model:

1. **warm-up**: every NPC speaks once (the first `serial` of them one at a time, which gives the
   cold time to first token; the rest together), so each has its previous turn resident;
2. **serial**: the first `serial` NPCs speak again, one at a time, through one client: the
   baseline interactions/s and the warm time to first token;
3. **N at once** for each N: N NPCs each send one interaction at the same moment, each from its
   own client; interactions/s, aggregate decode tokens/s and latency percentiles;
4. **llama.cpp's ceiling**: the same model in a bare context, N sequences of the median prompt
   length decoded in one batch per step with no sampling, grammar or governance: what the
   engine's aggregate decode rate is a fraction of.

Every figure comes from this one run (ratios compare like with like on a shared machine).

With `base_url` (`--backend openai --base-url URL`) the model is a remote server's (llama-server,
vLLM, SGLang, or `loreguard bench stand-in-engine`): the same figures but the ceiling, plus
`kv_hit_rate` as the server reports cached prompt tokens.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from loreguard.client import AsyncClient, Client
from loreguard.memory import MemoryStore
from loreguard.server.bench.inference import _LINES, bench_profiles, bench_world
from loreguard.server.inference.base import Generation, GenerationRequest, InferenceBackend
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.llama_native import NativeContext
from loreguard.server.inference.recording import RecordingBackend
from loreguard.server.sidecar.stats import percentile
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


def llama_cpp_ceiling(backend: LlamaCppBackend, n_sequences: int, prompt_tokens: int, steps: int) -> float:
    """Aggregate decode tokens/s of llama.cpp alone: `n_sequences` prompts of `prompt_tokens`
    prefilled, then `steps` steps each decoding one token of every sequence in one batch."""
    model = backend.native_model  # the same weights, a context of its own
    n_batch = max(512, n_sequences)
    ctx = NativeContext(
        model,
        n_ctx=max(256, -(-n_sequences * (prompt_tokens + steps + 8) // 256) * 256),
        n_batch=n_batch,
        n_threads=backend.n_threads,
        n_seq_max=max(2, n_sequences),
    )
    try:
        rows = [(100 + (i % 997), i, s) for s in range(n_sequences) for i in range(prompt_tokens)]
        for start in range(0, len(rows), n_batch):
            chunk = rows[start : start + n_batch]
            status = ctx.decode([r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk], [False] * len(chunk))
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status} while prefilling")
        started = time.perf_counter()
        for k in range(steps):
            seqs = list(range(n_sequences))
            status = ctx.decode([200 + k] * n_sequences, [prompt_tokens + k] * n_sequences, seqs, [True] * n_sequences)
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status} while decoding")
            ctx.logits_row(-1)  # waits for the device, as sampling would
        return n_sequences * steps / (time.perf_counter() - started)
    finally:
        ctx.close()


async def _at_once(address: str, asks: list[tuple[str, str]]) -> tuple[float, list[float]]:
    """Every (npc, line) sent at the same moment, one client each; wall seconds and latencies."""
    latencies: list[float] = []

    async def one(npc_id: str, line: str) -> None:
        async with AsyncClient(address, timeout_s=3600) as client:
            started = time.perf_counter()
            result = await client.interact(npc_id, line)
            latencies.append((time.perf_counter() - started) * 1000)
            if result.npc_id != npc_id:
                raise RuntimeError(f"{npc_id} was answered for {result.npc_id}")

    started = time.perf_counter()
    await asyncio.gather(*(one(npc, line) for npc, line in asks))
    return time.perf_counter() - started, latencies


def _first_attempts(calls: list[tuple[GenerationRequest, Generation]]) -> list[Generation]:
    """Each NPC's first generation in `calls` (a retry reuses its own first attempt's prompt)."""
    seen: dict[str, Generation] = {}
    for request, generation in calls:
        if request.purpose == "dialogue":
            seen.setdefault(request.npc_id, generation)
    return list(seen.values())


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else float("nan")


#: Per N at once: interactions/s, aggregate decode tokens/s, latencies (ms).
_AtOnce = dict[int, tuple[float, float, list[float]]]


@dataclass(frozen=True)
class _Phases:
    """What the sidecar phases measured, for the figures."""

    #: The warm-up's one-at-a-time turns (nothing of the NPC cached) and the serial baseline's.
    cold: list[Generation]
    warm: list[Generation]
    serial_rate: float
    per_n: _AtOnce


def _backend(
    n_max: int,
    model: str | None,
    threads: int | None,
    gpu_layers: int,
    device: str,
    kv_budget_mib: int | None,
    base_url: str | None,
) -> tuple[InferenceBackend, dict[str, object]]:
    """The remote server at `base_url`, or the in-process engine with room for every NPC; and
    the figures that describe it."""
    if base_url is not None:
        from loreguard.server.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig

        remote = OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=base_url, model=model, timeout_s=3600))
        figures: dict[str, object] = {"model": remote.fingerprint().file_name, "engine": remote.engine.kind}
        figures |= {"slots": remote.max_concurrency, "npcs": n_max}
        return remote, figures
    config = LlamaCppConfig(
        model_path=model,
        n_threads=threads,
        n_gpu_layers=gpu_layers,
        device=device,
        parallel=n_max,
        resident_sequences=n_max,
        kv_budget_mib=kv_budget_mib,
    )
    local = LlamaCppBackend(config)
    return local, {"model": local.fingerprint().file_name, "threads": local.n_threads, "npcs": n_max}


def _sidecar(data: Path, backend: InferenceBackend, n_npcs: int, facts: int) -> tuple[Sidecar, list[str]]:
    """A started sidecar whose store holds the bench world and `n_npcs` NPCs; their ids."""
    store = MemoryStore(data / "bench.sqlite")
    store.load_world(bench_world())
    profiles = bench_profiles(n_npcs, facts=facts)
    for profile in profiles:
        store.register_npc(profile)
    sidecar = Sidecar(store, backend, SidecarConfig(port=0, queue_size=n_npcs * 2, request_timeout_ms=3_600_000))
    sidecar.start()
    return sidecar, [p.id for p in profiles]


def _warm_up(address: str, recorder: RecordingBackend, ids: list[str], serial: int) -> list[Generation]:
    """Every NPC speaks once, so each has its previous turn resident: the first `serial` one at a
    time, whose first attempts are returned (nothing of theirs was cached), the rest together."""
    with Client(address, timeout_s=3600) as client:
        mark = len(recorder.calls)
        for npc in ids[:serial]:
            client.interact(npc, _LINES[0])
        cold = _first_attempts(recorder.calls[mark:])
    if len(ids) > serial:
        asyncio.run(_at_once(address, [(npc, _LINES[0]) for npc in ids[serial:]]))
    return cold


def _serial_baseline(address: str, recorder: RecordingBackend, ids: list[str], serial: int) -> tuple[float, list[Generation]]:
    """The first `serial` NPCs, warm, speak again one at a time through one client: interactions/s
    and their first attempts."""
    with Client(address, timeout_s=3600) as client:
        mark = len(recorder.calls)
        started = time.perf_counter()
        for npc in ids[:serial]:
            client.interact(npc, _LINES[1])
        rate = serial / (time.perf_counter() - started)
        return rate, _first_attempts(recorder.calls[mark:])


def _n_at_once(address: str, recorder: RecordingBackend, ids: list[str], npcs: tuple[int, ...]) -> tuple[_AtOnce, list[int]]:
    """For each N, N NPCs each send one interaction at the same moment, each from its own client;
    the figures per N, and the prompt length of every generation (the ceiling's prompt)."""
    per_n: _AtOnce = {}
    prompt_lengths: list[int] = []
    for round_, n in enumerate(npcs):
        mark = len(recorder.calls)
        line = _LINES[(2 + round_) % len(_LINES)]
        wall, latencies = asyncio.run(_at_once(address, [(npc, line) for npc in ids[:n]]))
        calls = recorder.calls[mark:]
        generated = sum(g.tokens_generated for _, g in calls)
        prompt_lengths += [g.tokens_evaluated + g.tokens_cached for _, g in calls]
        per_n[n] = (n / wall, generated / wall, latencies)
    return per_n, prompt_lengths


def _turn_figures(phases: _Phases) -> dict[str, object]:
    """The serial baseline, and cold against warm turns (the repeat turns are the warm ones)."""
    cold, repeat_turns = phases.cold, phases.warm
    # Cached over all prompt tokens of the repeat turns: the in-process engine's count, or what
    # a remote server reports in `usage` (0 when it reports nothing: docs/remote-engines.md).
    prompt_total = sum(g.tokens_evaluated + g.tokens_cached for g in repeat_turns)
    return {
        "serial_interactions_per_s": round(phases.serial_rate, 3),
        "ttft_cold_ms": _median([g.ttft_ms for g in cold]),
        "ttft_warm_ms": _median([g.ttft_ms for g in repeat_turns]),
        "kv_hit_speedup": round(
            statistics.median(g.ttft_ms for g in cold) / statistics.median(g.ttft_ms for g in repeat_turns), 1
        ),
        "prompt_tokens_per_turn": round(statistics.mean(g.tokens_evaluated + g.tokens_cached for g in repeat_turns), 1),
        "prompt_tokens_evaluated_per_turn": round(statistics.mean(g.tokens_evaluated for g in repeat_turns), 1),
        "kv_hit_rate": round(sum(g.tokens_cached for g in repeat_turns) / prompt_total, 3) if prompt_total else float("nan"),
    }


def _figures_at(n: int, phases: _Phases, backend: InferenceBackend, prompt_tokens: int, ceiling_steps: int) -> dict[str, object]:
    """N at once against the serial baseline and, in process, against llama.cpp's ceiling (measured
    here, once the sidecar has stopped, so that nothing else runs on the model)."""
    rate, decode_rate, latencies = phases.per_n[n]
    figures: dict[str, object] = {
        f"interactions_per_s_{n}": round(rate, 3),
        f"aggregate_decode_tok_s_{n}": round(decode_rate, 1),
        f"latency_p50_ms_{n}": round(statistics.median(latencies), 1),
        f"latency_p99_ms_{n}": round(percentile(latencies, 0.99), 1),
        f"speedup_vs_serial_{n}": round(rate / phases.serial_rate, 2),
    }
    if isinstance(backend, LlamaCppBackend):
        ceiling = llama_cpp_ceiling(backend, n, prompt_tokens, ceiling_steps)
        figures[f"ceiling_decode_tok_s_{n}"] = round(ceiling, 1)
        figures[f"fraction_of_ceiling_{n}"] = round(decode_rate / ceiling, 3)
    return figures


def bench_concurrency(
    *,
    npcs: tuple[int, ...] = (1, 8, 32),
    serial: int = 8,
    facts: int = 8,
    model: str | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    device: str = "auto",
    kv_budget_mib: int | None = None,
    ceiling_steps: int = 32,
    base_url: str | None = None,
) -> dict[str, object]:
    n_max = max(npcs)
    serial = min(serial, n_max)
    backend, figures = _backend(n_max, model, threads, gpu_layers, device, kv_budget_mib, base_url)
    recorder = RecordingBackend(backend)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        sidecar, ids = _sidecar(Path(tmp), recorder, n_max, facts)
        try:
            cold = _warm_up(sidecar.address, recorder, ids, serial)
            serial_rate, warm = _serial_baseline(sidecar.address, recorder, ids, serial)
            per_n, prompt_lengths = _n_at_once(sidecar.address, recorder, ids, npcs)
            if isinstance(backend, LlamaCppBackend):
                figures["resident_prefixes"] = backend.resident_prefixes
        finally:
            sidecar.stop()
    phases = _Phases(cold=cold, warm=warm, serial_rate=serial_rate, per_n=per_n)
    figures |= _turn_figures(phases)
    prompt_tokens = int(statistics.median(prompt_lengths))
    for n in npcs:
        figures |= _figures_at(n, phases, backend, prompt_tokens, ceiling_steps)
    engine = backend.engine if isinstance(backend, LlamaCppBackend) else None
    if engine is not None:
        figures["engine_peak_decoding"] = engine.stats.peak_decoding
        figures["engine_steps"] = engine.stats.steps
        figures["engine_outside_decode_share"] = round(engine.stats.outside_decode_share, 4)
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    backend.close()
    return figures
