"""`loreguard bench town`: a town of NPCs made ready at launch, evaluated and restored.

What a game with many NPCs does when it starts: every NPC registered and warmed (`warm`), one
after another, before the player reaches any of them. Each round launches the model twice on one
prompt cache folder (`prompt_states`):

- `cold`: the folder is empty, as on a game's first launch: every prompt is evaluated (and saved);
- `restored`: the next launch finds the files and loads them instead.

Figures (medians over the rounds): `cold_warm_ms` and `restored_warm_ms` (all NPCs warmed), their
ratio `restored_over_cold` (the goal is 0.1 or below), `prompt_tokens` (per NPC) and
`state_mib` (per NPC, on disk). The files are read from the page cache here; after a reboot a
disk reads them at its own speed (a 1.5B's NPC is ~20 MiB).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import NpcProfile
from loreguard.server.bench.inference import PLACES, bench_profiles, bench_world
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.prompt_states import state_files
from loreguard.server.pipeline import GovernancePipeline


def _launch(cache: Path, store_path: Path, npc_ids: list[str], config: LlamaCppConfig) -> tuple[float, int, int]:
    """One launch warming every NPC: (milliseconds, tokens evaluated, tokens restored)."""
    backend = LlamaCppBackend(config.model_copy(update={"prompt_cache_dir": str(cache)}))
    store = MemoryStore(store_path)
    try:
        pipeline = GovernancePipeline(store, backend)
        started = time.perf_counter()
        evaluated = restored = 0
        for npc_id in npc_ids:
            result = backend.warm(npc_id, pipeline.warm_prompt(npc_id))
            if result.outcome != "warmed":
                raise RuntimeError(f"the warm-up of {npc_id} ended {result.outcome}: raise --kv-budget-mib")
            evaluated += result.tokens_evaluated
            restored += result.tokens_restored
        return (time.perf_counter() - started) * 1000, evaluated, restored
    finally:
        backend.close()
        store.close()


def _town_profiles(npcs: int, facts: int) -> list[NpcProfile]:
    """`bench_profiles`, each named after a place too: the names repeat every eight NPCs, and two
    NPCs with one prompt would share one evaluation (no town is like that)."""
    out = []
    for n, profile in enumerate(bench_profiles(npcs, facts)):
        name = f"{profile.name} of {PLACES[n % len(PLACES)]}"
        out.append(profile.model_copy(update={"name": name, "persona": f"You are {name}. {profile.persona}"}))
    return out


def bench_town(
    *, npcs: int = 20, rounds: int = 2, facts: int = 8, model: str | None = None, threads: int | None = None,
    gpu_layers: int = 0, device: str = "auto", kv_budget_mib: int = 1024,
) -> dict[str, object]:  # fmt: skip
    config = LlamaCppConfig(
        model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, device=device, kv_budget_mib=kv_budget_mib,
        prompt_cache_mib=4096,
    )  # fmt: skip
    profiles = _town_profiles(npcs, facts)
    ids = [p.id for p in profiles]
    cold: list[float] = []
    restored: list[float] = []
    tokens = size = 0
    with tempfile.TemporaryDirectory(prefix="loreguard-town-") as tmp:
        store_path = Path(tmp) / "town.sqlite"
        store = MemoryStore(store_path)
        store.load_world(bench_world())
        for profile in profiles:
            store.register_npc(profile)
        store.close()
        for round_ in range(rounds):
            cache = Path(tmp) / f"cache-{round_}"
            ms, evaluated, _ = _launch(cache, store_path, ids, config)
            cold.append(ms)
            ms, again, loaded = _launch(cache, store_path, ids, config)
            if again or loaded < evaluated:
                raise RuntimeError(f"the relaunch evaluated {again} tokens and restored {loaded} of {evaluated}")
            restored.append(ms)
            tokens = evaluated
            files = state_files(cache)
            size = sum(p.stat().st_size for p in files) // max(1, len(files))
    cold_ms, restored_ms = statistics.median(cold), statistics.median(restored)
    return {
        "npcs": npcs,
        "rounds": rounds,
        "prompt_tokens": round(tokens / npcs),
        "state_mib": round(size / 2**20, 1),
        "cold_warm_ms": round(cold_ms, 1),
        "restored_warm_ms": round(restored_ms, 1),
        "restored_over_cold": round(restored_ms / cold_ms, 4) if cold_ms else 0.0,
    }
