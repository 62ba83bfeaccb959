"""`loreguard bench streaming`: streamed against whole replies, on the same interactions.

Two real sidecars, each with its own copy of the embedded model and its own store holding the
same world and the 8-NPC rotation of `bench inference`. Every turn (NPC, player line) is sent to
both, one after the other, alternating which goes first: one as a plain `interact`, the other
with `stream: true`. Both stores see the same interactions in the same order, so prompts and
seeds are equal and (on the CPU's one-slot engine) so are the outputs: the times compare like
with like, taken at the client.

Figures: time to the first chunk and to the whole reply (`interact.ok`) of the streamed turns,
their ratio; the plain turns' whole-reply time, and how much slower a streamed whole reply is
(over all turns, and over the turns where both wrote the very same text: the cost of streaming
itself, without the time cuts save);
`released_then_rejected` (streamed turns whose chunks do not add up to the final dialogue: 0 by
design); attempts stopped early by a failed sentence, and the tokens that saved (against the
plain run's same attempt, where it wrote the same text).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from loreguard.client import Client
from loreguard.memory import MemoryStore
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.wire import InteractChunk
from loreguard.server.bench_inference import _LINES, bench_profiles, bench_world
from loreguard.server.pipeline.inference.llama_backend import LlamaCppBackend, LlamaCppConfig
from loreguard.server.sidecar.stats import percentile
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


def _sidecar(data: Path, npcs: int, facts: int, config: LlamaCppConfig) -> Sidecar:
    store = MemoryStore(data / "bench.db")
    store.load_world(bench_world())
    for profile in bench_profiles(npcs, facts):
        store.register_npc(profile)
    sidecar = Sidecar(store, LlamaCppBackend(config), SidecarConfig(port=0, request_timeout_ms=3_600_000))
    sidecar.start()
    return sidecar


def _plain(client: Client, npc_id: str, line: str) -> tuple[float, InteractionResult]:
    started = time.perf_counter()
    result = client.interact(npc_id, line)
    return (time.perf_counter() - started) * 1000, result


def _streamed(client: Client, npc_id: str, line: str) -> tuple[float | None, float, list[InteractChunk], InteractionResult]:
    started = time.perf_counter()
    first: float | None = None
    chunks: list[InteractChunk] = []
    for item in client.interact_stream(npc_id, line):
        if isinstance(item, InteractionResult):
            return first, (time.perf_counter() - started) * 1000, chunks, item
        if first is None:
            first = (time.perf_counter() - started) * 1000
        chunks.append(item)
    raise RuntimeError("the stream ended without its result")


def bench_streaming(
    *,
    npcs: int = 8,
    rounds: int = 2,
    facts: int = 8,
    model: str | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    reproducible: bool = False,
) -> dict[str, object]:
    """`reproducible`: the one-at-a-time engine, whose text depends only on prompt and seed, so
    the two sidecars write the same text until a stream is cut (the batched engine's numerics
    depend on where tokens land in its cache, which a stopped generation changes)."""
    config = LlamaCppConfig(model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, reproducible=reproducible)
    first_ms: list[float] = []
    streamed_ms: list[float] = []
    plain_ms: list[float] = []
    #: The same, for turns after each NPC's first (its prompt prefix already cached).
    warm_first: list[float] = []
    warm_full: list[float] = []
    warm_plain: list[float] = []
    #: (streamed, plain) times of turns whose attempts wrote exactly the same text (no cut).
    same_work: list[tuple[float, float]] = []
    released_then_rejected = 0
    chunks_total = 0
    aborted = saved = same_output = turns = cut = fallbacks = 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "plain").mkdir()
        (Path(tmp) / "stream").mkdir()
        plain_side = _sidecar(Path(tmp) / "plain", npcs, facts, config)
        stream_side = _sidecar(Path(tmp) / "stream", npcs, facts, config)
        try:
            with Client(plain_side.address, timeout_s=3600) as plain, Client(stream_side.address, timeout_s=3600) as streamed:
                for round_ in range(rounds):
                    line = _LINES[round_ % len(_LINES)]
                    for n in range(npcs):
                        npc_id = f"npc_{n}"
                        if (round_ * npcs + n) % 2 == 0:
                            p_ms, p_result = _plain(plain, npc_id, line)
                            f_ms, s_ms, chunks, s_result = _streamed(streamed, npc_id, line)
                        else:
                            f_ms, s_ms, chunks, s_result = _streamed(streamed, npc_id, line)
                            p_ms, p_result = _plain(plain, npc_id, line)
                        turns += 1
                        plain_ms.append(p_ms)
                        streamed_ms.append(s_ms)
                        chunks_total += len(chunks)
                        if f_ms is not None:
                            first_ms.append(f_ms)
                        if round_ > 0:
                            warm_full.append(s_ms)
                            warm_plain.append(p_ms)
                            if f_ms is not None:
                                warm_first.append(f_ms)
                        if "".join(c.text for c in chunks) != s_result.dialogue:
                            released_then_rejected += 1
                        fallbacks += s_result.fallback_used
                        s_attempts, p_attempts = s_result.receipt.attempts, p_result.receipt.attempts
                        # Equal prompts and seeds: the streamed text is the plain one, or its start when cut.
                        same_output += bool(
                            s_attempts and p_attempts and p_attempts[0].raw_output.startswith(s_attempts[0].raw_output)
                        )
                        if [a.raw_output for a in s_attempts] == [a.raw_output for a in p_attempts]:
                            # The same work, word for word: what streaming itself costs.
                            same_work.append((s_ms, p_ms))
                        for i, attempt in enumerate(s_attempts):
                            if attempt.stream is None:
                                continue
                            cut += attempt.stream.cut is not None
                            if not attempt.stream.aborted:
                                continue
                            aborted += 1
                            twin = p_attempts[i] if i < len(p_attempts) else None
                            if twin is not None and twin.raw_output.startswith(attempt.raw_output):
                                saved += max(0, twin.tokens_generated - attempt.tokens_generated)
        finally:
            stream_side.stop()
            plain_side.stop()
    first_p50 = percentile(first_ms, 0.5) if first_ms else 0.0
    full_p50 = percentile(streamed_ms, 0.5)
    plain_p50 = percentile(plain_ms, 0.5)
    return {
        "turns": turns,
        "chunks_per_reply": round(chunks_total / max(1, turns), 2),
        "first_chunk_ms_p50": round(first_p50, 1),
        "full_reply_ms_p50": round(full_p50, 1),
        "first_chunk_share_of_full": round(first_p50 / full_p50, 3) if full_p50 else 0.0,
        "first_chunk_share_of_full_goal": 0.40,
        "nonstreamed_reply_ms_p50": round(plain_p50, 1),
        "streamed_slowdown_p50_pct": round((full_p50 / plain_p50 - 1) * 100, 1) if plain_p50 else 0.0,
        "streamed_slowdown_total_pct": round((sum(streamed_ms) / sum(plain_ms) - 1) * 100, 1) if plain_ms else 0.0,
        "streamed_slowdown_goal_pct": 5.0,
        "same_work_turns": len(same_work),
        "same_work_slowdown_total_pct": (
            round((sum(a for a, _ in same_work) / sum(b for _, b in same_work) - 1) * 100, 1) if same_work else 0.0
        ),
        "released_then_rejected": released_then_rejected,
        "stream_cuts": cut,
        "aborted_early_attempts": aborted,
        "aborted_early_tokens_saved": saved,
        "streamed_fallbacks": fallbacks,
        "same_first_output_rate": round(same_output / max(1, turns), 3),
        "first_chunk_ms_mean": round(statistics.fmean(first_ms), 1) if first_ms else 0.0,
        "warm_turns": len(warm_full),
        "warm_first_chunk_ms_p50": _p50(warm_first),
        "warm_full_reply_ms_p50": _p50(warm_full),
        "warm_first_chunk_share_of_full": round(_p50(warm_first) / _p50(warm_full), 3) if warm_full else 0.0,
        "warm_nonstreamed_reply_ms_p50": _p50(warm_plain),
    }


def _p50(values: list[float]) -> float:
    return round(percentile(values, 0.5), 1) if values else 0.0
