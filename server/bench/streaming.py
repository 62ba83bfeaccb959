"""`loreguard bench streaming`: streamed against whole replies, on the same interactions.

Two real sidecars, each with its own copy of the embedded model and its own store holding the
same world and the 8-NPC rotation of `bench inference`. Every turn (NPC, player line) is sent to
both, one after the other, alternating which goes first: one as a plain `interact`, the other
with `stream: true`. Both stores see the same interactions in the same order, so prompts and
seeds are equal and (on the CPU's one-slot engine) so are the outputs: the times compare like
with like, taken at the client.

The rotation's NPCs are warmed first (`npc.warm`, as a game does when they enter the scene;
the bench waits until the warm-ups are done), so even their first turns evaluate only the new
message. Then the same number of NPCs that were never warmed (same prompt lengths, other names)
each take a first turn: the cold case, reported beside the headline. Once a stream is cut the
two sidecars part ways (the streamed retry goes on from the released words, the plain one starts
over), so last come warmed NPCs whose parroting check is off, on which the embedded model's
streams are not cut: both sidecars do the same work there, and the time between them is what
streaming itself costs (`same_work_*`, over every turn whose attempts wrote the same text).

Figures: time to the first chunk and to the whole reply (`interact.ok`) of the streamed turns,
their ratio (the warmed rotation: the headline; its first turns; its later turns; the cold
first turns); the plain turns' whole-reply time, and how much slower a streamed whole reply is
(over all turns, and over the turns where both wrote the very same text: the cost of streaming
itself, without the time cuts save);
`released_then_rejected` (streamed turns whose chunks do not add up to the final dialogue: 0 by
design); attempts stopped early by a failed sentence, and the tokens that saved (against the
plain run's same attempt, where it wrote the same text).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from loreguard.client import Client
from loreguard.memory import MemoryStore
from loreguard.schemas.npc import NpcProfile
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.wire import InteractChunk
from loreguard.server.bench.inference import _LINES, bench_profiles, bench_world
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.sidecar.stats import percentile
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


def cold_profiles(n_npcs: int, facts: int) -> list[NpcProfile]:
    """NPCs like the rotation's, prompts of the same length, that no cache has seen: their
    names differ, so their prompts share nothing with the rotation's past the template's start."""
    profiles = []
    for profile in bench_profiles(n_npcs, facts):
        data = profile.model_dump(mode="json")
        data["id"] = "cold_" + profile.id
        data["name"] = "Old " + profile.name
        profiles.append(NpcProfile.model_validate(data))
    return profiles


def same_work_profiles(n_npcs: int, facts: int) -> list[NpcProfile]:
    """NPCs like the rotation's with the parroting check off, so that (with the embedded model,
    which echoes the player) their streams are not cut: the streamed and the plain sidecar then
    do the same work, and the time between them is what streaming itself costs."""
    profiles = []
    for profile in bench_profiles(n_npcs, facts):
        data = profile.model_dump(mode="json")
        data["id"] = "same_" + profile.id
        data["name"] = "Young " + profile.name
        data["output_limits"] = {**data.get("output_limits", {}), "max_copy_similarity": 1.01}
        profiles.append(NpcProfile.model_validate(data))
    return profiles


def _sidecar(data: Path, npcs: int, facts: int, config: LlamaCppConfig) -> Sidecar:
    store = MemoryStore(data / "bench.db")
    store.load_world(bench_world())
    for profile in bench_profiles(npcs, facts) + cold_profiles(npcs, facts) + same_work_profiles(npcs, facts):
        store.register_npc(profile)
    sidecar = Sidecar(store, LlamaCppBackend(config), SidecarConfig(port=0, request_timeout_ms=3_600_000))
    sidecar.start()
    return sidecar


#: The longest a bench waits for its warm-ups (a slow model on few cores takes minutes).
WARM_WAIT_S = 3600.0


def warm_and_wait(clients: list[Client], npc_ids: list[str]) -> tuple[float, dict[str, int]]:
    """Warm the NPCs on every sidecar, as a game does when they enter the scene, and wait until
    the warm-ups are done (`stats` counter `warm.pending`); the time it took and the outcomes."""
    started = time.perf_counter()
    for client in clients:
        for npc_id in npc_ids:
            client.warm(npc_id)
    for client in clients:
        client.wait_for_warm_ups(WARM_WAIT_S)
    elapsed = (time.perf_counter() - started) * 1000
    outcomes: Counter[str] = Counter()
    for client in clients:
        counters = client.stats().counters
        for name in ("warmed", "already", "no_room", "failed", "unsupported", "yielded"):
            outcomes[name] += counters.get(f"warm.{name}", 0)
    return elapsed, dict(outcomes)


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


@dataclass
class _Times:
    """First-chunk and whole-reply times of streamed turns, and the plain twins' whole replies."""

    first: list[float] = field(default_factory=list)
    full: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)

    def add(self, first: float | None, full: float, plain: float) -> None:
        if first is not None:
            self.first.append(first)
        self.full.append(full)
        self.plain.append(plain)

    def share(self) -> float:
        return round(_p50(self.first) / _p50(self.full), 3) if self.full and self.first else 0.0


@dataclass
class _Tally:
    released_then_rejected: int = 0
    chunks: int = 0
    aborted: int = 0
    saved: int = 0
    same_output: int = 0
    turns: int = 0
    cut: int = 0
    #: Attempts that went on from words an earlier attempt released, and those whose whole
    #: output was the reply.
    continued: int = 0
    continued_accepted: int = 0
    fallbacks: int = 0
    #: (streamed, plain) times of turns whose attempts wrote exactly the same text (no cut).
    same_work: list[tuple[float, float]] = field(default_factory=list)
    #: The rule (or gate) of each cut's first failure: why streams ended early.
    cut_rules: Counter[str] = field(default_factory=Counter)


def _turn(
    plain: Client, streamed: Client, npc_id: str, line: str, plain_first: bool, tally: _Tally
) -> tuple[float | None, float, float, bool]:
    """One turn on both sidecars; (first chunk, whole streamed reply, whole plain reply) in ms,
    and whether the streamed reply was cut (it ends with the text released before the cut)."""
    if plain_first:
        p_ms, p_result = _plain(plain, npc_id, line)
        f_ms, s_ms, chunks, s_result = _streamed(streamed, npc_id, line)
    else:
        f_ms, s_ms, chunks, s_result = _streamed(streamed, npc_id, line)
        p_ms, p_result = _plain(plain, npc_id, line)
    tally.turns += 1
    tally.chunks += len(chunks)
    if "".join(c.text for c in chunks) != s_result.dialogue:
        tally.released_then_rejected += 1
    tally.fallbacks += s_result.fallback_used
    s_attempts, p_attempts = s_result.receipt.attempts, p_result.receipt.attempts
    # Equal prompts and seeds: the streamed text is the plain one, or its start when cut.
    tally.same_output += bool(s_attempts and p_attempts and p_attempts[0].raw_output.startswith(s_attempts[0].raw_output))
    if [a.raw_output for a in s_attempts] == [a.raw_output for a in p_attempts]:
        # The same work, word for word: what streaming itself costs.
        tally.same_work.append((s_ms, p_ms))
    for i, attempt in enumerate(s_attempts):
        if attempt.stream is None:
            continue
        tally.cut += attempt.stream.cut is not None
        if attempt.stream.continued_chars:
            tally.continued += 1
            tally.continued_accepted += attempt.stream.cut is None and not attempt.failures
        if attempt.stream.cut is not None:
            failures = attempt.stream.cut.failures
            tally.cut_rules[(failures[0].rule_id or failures[0].gate.value) if failures else "other"] += 1
        if not attempt.stream.aborted:
            continue
        tally.aborted += 1
        twin = p_attempts[i] if i < len(p_attempts) else None
        if twin is not None and twin.raw_output.startswith(attempt.raw_output):
            tally.saved += max(0, twin.tokens_generated - attempt.tokens_generated)
    last = s_attempts[-1].stream if s_attempts else None
    print(
        f"[{tally.turns}] {npc_id}: {line!r} -> streamed {s_result.dialogue!r} in chunks of attempts "
        f"{[c.attempt for c in chunks]} | plain {p_result.dialogue!r}",
        file=sys.stderr,
        flush=True,
    )
    return f_ms, s_ms, p_ms, last is not None and last.cut is not None


@dataclass
class _StreamingRun:
    """What the two sidecars measured, grouped as the figures report it."""

    warm_ms: float = 0.0
    warm_outcomes: dict[str, int] = field(default_factory=dict)
    #: The rotation, warmed before its first turn (the headline); its first turns; its later
    #: turns (the NPC's previous turn cached); first turns of NPCs never warmed.
    warmed: _Times = field(default_factory=_Times)
    warmed_first: _Times = field(default_factory=_Times)
    later: _Times = field(default_factory=_Times)
    cold: _Times = field(default_factory=_Times)
    #: The warmed rotation's turns whose streamed reply was not cut (a cut reply ends at its
    #: released text, often right after the first chunk, so its ratio says little about streaming).
    uncut: _Times = field(default_factory=_Times)
    tally: _Tally = field(default_factory=_Tally)
    #: The same-work NPCs' turns (parroting off), kept out of every other figure.
    same_tally: _Tally = field(default_factory=_Tally)


def _warm_up(plain: Client, streamed: Client, npcs: int, run: _StreamingRun) -> None:
    """Warm the rotation on both sidecars (timed), then the same-work NPCs apart (not counted)."""
    run.warm_ms, run.warm_outcomes = warm_and_wait([plain, streamed], [f"npc_{n}" for n in range(npcs)])
    warm_and_wait([plain, streamed], [f"same_npc_{n}" for n in range(npcs)])


def _warmed_rotation(plain: Client, streamed: Client, npcs: int, rounds: int, run: _StreamingRun) -> None:
    """`rounds` turns of every warmed NPC, alternating which sidecar goes first."""
    for round_ in range(rounds):
        line = _LINES[round_ % len(_LINES)]
        for n in range(npcs):
            first, full, whole, was_cut = _turn(plain, streamed, f"npc_{n}", line, (round_ * npcs + n) % 2 == 0, run.tally)
            for times in (run.warmed, run.later if round_ else run.warmed_first) + (() if was_cut else (run.uncut,)):
                times.add(first, full, whole)


def _cold_first_turns(plain: Client, streamed: Client, npcs: int, run: _StreamingRun) -> None:
    """One first turn of each NPC never warmed: the cold case."""
    for n in range(npcs):
        first, full, whole, _ = _turn(plain, streamed, f"cold_npc_{n}", _LINES[0], n % 2 == 0, run.tally)
        run.cold.add(first, full, whole)


def _same_work_turns(plain: Client, streamed: Client, npcs: int, run: _StreamingRun) -> None:
    """One turn of each same-work NPC, whose streams are not cut: what streaming itself costs."""
    for n in range(npcs):
        _turn(plain, streamed, f"same_npc_{n}", _LINES[0], n % 2 == 0, run.same_tally)


def bench_streaming(
    *,
    npcs: int = 8,
    rounds: int = 2,
    facts: int = 8,
    model: str | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    device: str = "auto",
    reproducible: bool = False,
) -> dict[str, object]:
    """`reproducible`: the one-at-a-time engine, whose text depends only on prompt and seed, so
    the two sidecars write the same text until a stream is cut (the batched engine's numerics
    depend on where tokens land in its cache, which a stopped generation changes)."""
    config = LlamaCppConfig(
        model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, device=device, reproducible=reproducible
    )
    run = _StreamingRun()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "plain").mkdir()
        (Path(tmp) / "stream").mkdir()
        plain_side = _sidecar(Path(tmp) / "plain", npcs, facts, config)
        stream_side = _sidecar(Path(tmp) / "stream", npcs, facts, config)
        try:
            with Client(plain_side.address, timeout_s=3600) as plain, Client(stream_side.address, timeout_s=3600) as streamed:
                _warm_up(plain, streamed, npcs, run)
                _warmed_rotation(plain, streamed, npcs, rounds, run)
                _cold_first_turns(plain, streamed, npcs, run)
                _same_work_turns(plain, streamed, npcs, run)
        finally:
            stream_side.stop()
            plain_side.stop()
    return _figures(run)


def _figures(run: _StreamingRun) -> dict[str, object]:
    """Every figure, in the order the bench prints them."""
    tally, warmed = run.tally, run.warmed
    return {
        "turns": tally.turns,
        "chunks_per_reply": round(tally.chunks / max(1, tally.turns), 2),
        "warm_up_ms": round(run.warm_ms, 1),
        **{f"warm_ups_{name}": count for name, count in sorted(run.warm_outcomes.items())},
        **_time_figures(run),
        **_slowdown_figures(run),
        **_stream_figures(tally),
        "first_chunk_ms_mean": round(statistics.fmean(warmed.first), 1) if warmed.first else 0.0,
    }


def _time_figures(run: _StreamingRun) -> dict[str, object]:
    """First chunk against whole reply: the warmed rotation (the headline), its uncut turns, its
    first turns, the cold first turns and the rotation's later turns."""
    warmed, uncut, warmed_first, cold, later = run.warmed, run.uncut, run.warmed_first, run.cold, run.later
    return {
        "first_chunk_ms_p50": _p50(warmed.first),
        "full_reply_ms_p50": _p50(warmed.full),
        "first_chunk_share_of_full": warmed.share(),
        "first_chunk_share_of_full_goal": 0.40,
        "first_chunk_share_of_nonstreamed": round(_p50(warmed.first) / _p50(warmed.plain), 3) if warmed.plain else 0.0,
        "uncut_turns": len(uncut.full),
        "uncut_first_chunk_share_of_full": uncut.share(),
        "warmed_first_turn_first_chunk_ms_p50": _p50(warmed_first.first),
        "warmed_first_turn_full_reply_ms_p50": _p50(warmed_first.full),
        "warmed_first_turn_share_of_full": warmed_first.share(),
        "cold_turns": len(cold.full),
        "cold_first_chunk_ms_p50": _p50(cold.first),
        "cold_full_reply_ms_p50": _p50(cold.full),
        "cold_first_chunk_share_of_full": cold.share(),
        "warm_turns": len(later.full),
        "warm_first_chunk_ms_p50": _p50(later.first),
        "warm_full_reply_ms_p50": _p50(later.full),
        "warm_first_chunk_share_of_full": later.share(),
        "warm_nonstreamed_reply_ms_p50": _p50(later.plain),
    }


def _slowdown_figures(run: _StreamingRun) -> dict[str, object]:
    """How much slower a streamed whole reply is than a plain one: over the warmed and cold turns,
    and over the turns where both wrote the very same text (streaming's own cost)."""
    warmed, cold = run.warmed, run.cold
    every = _Times(warmed.first + cold.first, warmed.full + cold.full, warmed.plain + cold.plain)
    full_p50, plain_p50 = _p50(every.full), _p50(every.plain)
    same_work = run.tally.same_work + run.same_tally.same_work
    return {
        "nonstreamed_reply_ms_p50": plain_p50,
        "streamed_slowdown_p50_pct": round((full_p50 / plain_p50 - 1) * 100, 1) if plain_p50 else 0.0,
        "streamed_slowdown_total_pct": (round((sum(every.full) / sum(every.plain) - 1) * 100, 1) if every.plain else 0.0),
        "streamed_slowdown_goal_pct": 5.0,
        "same_work_turns": len(same_work),
        "same_work_slowdown_total_pct": (
            round((sum(a for a, _ in same_work) / sum(b for _, b in same_work) - 1) * 100, 1) if same_work else 0.0
        ),
        "same_work_slowdown_p50_pct": (
            round((percentile([a / b for a, b in same_work], 0.5) - 1) * 100, 1) if same_work else 0.0
        ),
    }


def _stream_figures(tally: _Tally) -> dict[str, object]:
    """What the streamed turns did: released text taken back (0 by design), cuts and why,
    continuations, attempts stopped early and the tokens that saved."""
    return {
        "released_then_rejected": tally.released_then_rejected,
        "stream_cuts": tally.cut,
        "stream_cuts_by_rule": " ".join(f"{rule}={n}" for rule, n in sorted(tally.cut_rules.items())) or "none",
        "stream_continuations": tally.continued,
        "stream_continuations_accepted": tally.continued_accepted,
        "aborted_early_attempts": tally.aborted,
        "aborted_early_tokens_saved": tally.saved,
        "streamed_fallbacks": tally.fallbacks,
        "same_first_output_rate": round(tally.same_output / max(1, tally.turns), 3),
    }


def _p50(values: list[float]) -> float:
    return round(percentile(values, 0.5), 1) if values else 0.0
