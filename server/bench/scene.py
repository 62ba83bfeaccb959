"""`loreguard bench scene`: a scene's lines against one-NPC interactions of the same length.

A real sidecar with the real model (the embedded one unless `--model`). Each scene has three
NPCs of `bench inference`'s kind (persona, lore, facts), a topic, and `lines` lines asked for one
at a time and streamed, as a game's `LoreguardScene` does. Every NPC has a twin: the same
profile under another name, that the player talks to alone. After each scene line, its
speaker's twin gets a one-NPC `interact` whose player line is the words the speaker heard
(same new message, the twin's own conversation so far): the like-for-like baseline, on the
same engine and cache, interleaved so that machine noise hits both alike. All NPCs are warmed
first (`npc.warm`), as a game does when they come on screen.

Then the gap: the same scenes again (fresh NPCs, no twins), the client asking for each next
line `pause_s` after the last one ended (the time a player reads it; a `LoreguardScene` waits
1.5 s by default), with the next speaker prefilled (`scene_prefetch`, the sidecar's default:
beside the line being spoken on a GPU, in the pause on the CPU) and without: the time from
asking to the line's first chunk, and between two lines' first chunks less the pause: what a
player waits through.

Figures: p50 time per line (whole reply) for scene lines and their twins, the ratio (the goal:
at most 1.1), the same per generated token (lines of different length compared like with
like), p50 prompt tokens evaluated per line and the cache's share; the gap's p50 with and
without prefill, and their ratio; fallbacks; lines said twice in one scene. The lines go to
stderr, to be read.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loreguard.client import Client
from loreguard.memory import MemoryStore
from loreguard.schemas.npc import NpcProfile
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.scene import SceneChunk
from loreguard.schemas.wire import InteractChunk
from loreguard.server.bench.inference import bench_profiles, bench_world
from loreguard.server.bench.streaming import warm_and_wait
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

TOPICS = (
    "The smith is late with the gate's new hinge, and carts are piling up outside.",
    "A stranger paid in old coins at the market this morning.",
    "The river is rising and the ferry may stop running.",
    "Someone saw lights in the old mill at night.",
)
SPEAKERS_PER_SCENE = 3


@dataclass
class _Line:
    ms: float
    first_ms: float | None
    tokens_generated: int
    tokens_evaluated: int
    tokens_cached: int
    fallback: bool

    @property
    def ms_per_token(self) -> float | None:
        return self.ms / self.tokens_generated if self.tokens_generated else None


def _line(ms: float, first_ms: float | None, result: InteractionResult) -> _Line:
    attempts = result.receipt.attempts
    return _Line(
        ms=ms,
        first_ms=first_ms,
        tokens_generated=sum(a.tokens_generated for a in attempts),
        tokens_evaluated=sum(a.tokens_evaluated for a in attempts),
        tokens_cached=sum(a.tokens_cached for a in attempts),
        fallback=result.fallback_used,
    )


@dataclass
class _Run:
    scene: list[_Line] = field(default_factory=list)
    single: list[_Line] = field(default_factory=list)
    #: ms between the first chunks of consecutive lines of a scene, less the pause between them.
    gaps: list[float] = field(default_factory=list)
    repeated: int = 0
    transcript: list[str] = field(default_factory=list)


def _profiles(scenes: int, facts: int, prefix: str) -> list[NpcProfile]:
    """Three NPCs a scene (distinct names within it); ids `<prefix>_<n>`."""
    profiles = []
    for n, profile in enumerate(bench_profiles(scenes * SPEAKERS_PER_SCENE, facts)):
        data = profile.model_dump(mode="json")
        data["id"] = f"{prefix}_{n}"
        profiles.append(NpcProfile.model_validate(data))
    return profiles


def _twins(profiles: list[NpcProfile]) -> list[NpcProfile]:
    """The same NPCs under other names, which the player talks to alone (their prompts share
    nothing with the scene NPCs' past the template's start)."""
    twins = []
    for profile in profiles:
        data = profile.model_dump(mode="json")
        data["id"] = "twin_" + profile.id
        data["name"] = "Old " + profile.name
        twins.append(NpcProfile.model_validate(data))
    return twins


def _sidecar(data: Path, profiles: list[NpcProfile], config: LlamaCppConfig, *, prefetch: bool) -> Sidecar:
    store = MemoryStore(data / "bench.db")
    store.load_world(bench_world())
    for profile in profiles:
        store.register_npc(profile)
    sidecar = Sidecar(
        store, LlamaCppBackend(config), SidecarConfig(port=0, request_timeout_ms=3_600_000, scene_prefetch=prefetch)
    )
    sidecar.start()
    return sidecar


def _scene_line(client: Client, scene_id: str) -> tuple[float, float | None, float, str, InteractionResult]:
    """(asked, first chunk, reply) as perf_counter() times, the speaker, its result."""
    started = time.perf_counter()
    first: list[float] = []

    def on_chunk(chunk: SceneChunk) -> None:
        if not first:
            first.append(time.perf_counter())

    reply = client.scene_next(scene_id, on_chunk=on_chunk)
    (line,) = reply.lines
    return started, first[0] if first else None, time.perf_counter(), line.speaker, line.result


def _single(client: Client, npc_id: str, said: str) -> tuple[float, float | None, InteractionResult]:
    started = time.perf_counter()
    first: float | None = None
    for item in client.interact_stream(npc_id, said[:2000]):
        if isinstance(item, InteractChunk):
            first = first if first is not None else (time.perf_counter() - started) * 1000
        else:
            return (time.perf_counter() - started) * 1000, first, item
    raise RuntimeError("the stream ended without its result")


def _play(
    client: Client,
    run: _Run,
    scenes: int,
    lines: int,
    prefix: str,
    twins: bool,
    progress: Callable[[str], None],
    pause_s: float = 0.0,
) -> None:
    for s in range(scenes):
        scene_id = f"{prefix}-scene-{s}"
        npcs = [f"{prefix}_{s * SPEAKERS_PER_SCENE + i}" for i in range(SPEAKERS_PER_SCENE)]
        client.scene_start(scene_id, npcs, topic=TOPICS[s % len(TOPICS)], max_lines=lines)
        said: list[str] = []
        previous_first: float | None = None
        heard_since: dict[str, list[str]] = {npc: [] for npc in npcs}
        for n in range(lines):
            if n and pause_s:
                threading.Event().wait(pause_s)  # the player reads the last line
            started, first_at, ended, speaker, result = _scene_line(client, scene_id)
            first_ms = (first_at - started) * 1000 if first_at is not None else None
            run.scene.append(_line((ended - started) * 1000, first_ms, result))
            if first_at is not None and previous_first is not None:
                run.gaps.append((first_at - previous_first - pause_s) * 1000)
            previous_first = first_at
            run.repeated += result.dialogue in said
            said.append(result.dialogue)
            run.transcript.append(f"[{scene_id}] {speaker}{' (fallback)' if result.fallback_used else ''}: {result.dialogue}")
            progress(run.transcript[-1])
            heard = " ".join(heard_since[speaker]) or "Good day."
            for npc in npcs:
                heard_since[npc] = [] if npc == speaker else heard_since[npc] + [result.dialogue]
            if twins:
                single_ms, single_first, single = _single(client, "twin_" + speaker, heard)
                run.single.append(_line(single_ms, single_first, single))
                progress(f"    twin {speaker}: {single.dialogue}")


def _p50(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else 0.0


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


def bench_scene(
    *,
    scenes: int = 3,
    lines: int = 6,
    facts: int = 8,
    model: str | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    device: str = "auto",
    pause_s: float = 1.0,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, object]:
    config = LlamaCppConfig(model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, device=device)
    compared, with_prefill, without_prefill = _Run(), _Run(), _Run()
    with tempfile.TemporaryDirectory() as tmp:
        scene_npcs = _profiles(scenes, facts, "npc")
        profiles = scene_npcs + _twins(scene_npcs) + _profiles(scenes, facts, "on") + _profiles(scenes, facts, "off")
        for name, prefetch in (("compared", True), ("off", False)):
            (Path(tmp) / name).mkdir()
            sidecar = _sidecar(Path(tmp) / name, profiles, config, prefetch=prefetch)
            try:
                with Client(sidecar.address, timeout_s=3600) as client:
                    warm_and_wait([client], [p.id for p in profiles])
                    if prefetch:
                        _play(client, compared, scenes, lines, "npc", True, progress)
                        _play(client, with_prefill, scenes, lines, "on", False, progress, pause_s)
                    else:
                        _play(client, without_prefill, scenes, lines, "off", False, progress, pause_s)
            finally:
                sidecar.stop()
    scene_ms, single_ms = _p50([x.ms for x in compared.scene]), _p50([x.ms for x in compared.single])
    scene_tok = _p50([t for x in compared.scene if (t := x.ms_per_token) is not None])
    single_tok = _p50([t for x in compared.single if (t := x.ms_per_token) is not None])
    gap_on, gap_off = _p50(with_prefill.gaps), _p50(without_prefill.gaps)

    def cached_share(run: list[_Line]) -> float:
        total = sum(x.tokens_evaluated + x.tokens_cached for x in run)
        return round(sum(x.tokens_cached for x in run) / total, 3) if total else 0.0

    return {
        "scene_lines": len(compared.scene),
        "scene_line_ms_p50": scene_ms,
        "single_line_ms_p50": single_ms,
        "scene_vs_single_line_ratio": _ratio(scene_ms, single_ms),
        "scene_ms_per_token_p50": scene_tok,
        "single_ms_per_token_p50": single_tok,
        "scene_vs_single_per_token_ratio": _ratio(scene_tok, single_tok),
        "scene_first_chunk_ms_p50": _p50([x.first_ms for x in compared.scene if x.first_ms is not None]),
        "single_first_chunk_ms_p50": _p50([x.first_ms for x in compared.single if x.first_ms is not None]),
        "scene_tokens_generated_p50": _p50([x.tokens_generated for x in compared.scene]),
        "single_tokens_generated_p50": _p50([x.tokens_generated for x in compared.single]),
        "scene_tokens_evaluated_per_line_p50": _p50([x.tokens_evaluated for x in compared.scene]),
        "single_tokens_evaluated_per_line_p50": _p50([x.tokens_evaluated for x in compared.single]),
        "scene_prompt_cached_share": cached_share(compared.scene),
        "single_prompt_cached_share": cached_share(compared.single),
        "pause_between_lines_s": pause_s,
        "ask_to_first_chunk_ms_p50_prefilled": _p50([x.first_ms for x in with_prefill.scene if x.first_ms is not None]),
        "ask_to_first_chunk_ms_p50_not_prefilled": _p50([x.first_ms for x in without_prefill.scene if x.first_ms is not None]),
        "gap_first_chunks_ms_p50_prefilled": gap_on,
        "gap_first_chunks_ms_p50_not_prefilled": gap_off,
        "gap_prefilled_vs_not_ratio": _ratio(gap_on, gap_off),
        "gap_tokens_evaluated_per_line_p50_prefilled": _p50([x.tokens_evaluated for x in with_prefill.scene]),
        "gap_tokens_evaluated_per_line_p50_not_prefilled": _p50([x.tokens_evaluated for x in without_prefill.scene]),
        "scene_fallbacks": sum(x.fallback for x in compared.scene + with_prefill.scene + without_prefill.scene),
        "scene_lines_said_twice_in_a_scene": compared.repeated + with_prefill.repeated + without_prefill.repeated,
    }
