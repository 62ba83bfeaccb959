"""`loreguard warm`: NPCs' prompts evaluated before a game ships, so a player's first launch
restores them from disk instead of evaluating them.

It builds each NPC's prompt exactly as the sidecar's warm-up would on a new save (the world loaded,
the NPC registered, nothing said yet), evaluates it on the reproducible engine (whose files both
engines can load: `prompt_states`) and writes one file per NPC into the output folder. By default
that folder is `<model>.prompts` beside the model file, which the sidecar reads by itself when it
serves that model; `loreguard bundle` carries it.

A file is only used on a player's machine when it matches: the same model file, llama.cpp build
and KV layout, and the same prompt. Warm again after changing an NPC, the world or the model.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import NpcProfile, WorldDefinition
from loreguard.schemas.memory import BatchResult
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.prompt_states import file_name, read_header
from loreguard.server.pipeline import GovernancePipeline


class WarmError(ValueError):
    """The world or an NPC could not be loaded; the message says which and why."""


@dataclass(frozen=True)
class WarmedNpc:
    npc_id: str
    tokens: int
    seconds: float
    file: Path
    size_bytes: int


def shipped_folder(model_path: Path) -> Path:
    """Where a model's shipped prompt states live: `<model file without .gguf>.prompts` beside it."""
    return model_path.with_suffix(".prompts")


def warm_prompts(
    world: WorldDefinition, npcs: Sequence[NpcProfile], load: Callable[[Path], LlamaCppBackend], out: Path
) -> list[WarmedNpc]:
    """Evaluate every NPC's prompt into `out` with the backend `load(out)` gives (its prompt cache
    in `out`); one `WarmedNpc` each, in the order given. `WarmError` for a world or NPC the
    memory refuses (nothing is written then)."""
    with tempfile.TemporaryDirectory(prefix="loreguard-warm-") as scratch:
        store = MemoryStore(Path(scratch) / "memory.sqlite")
        try:
            _load(store, world, npcs)
            backend = load(out)
            try:
                pipeline = GovernancePipeline(store, backend)
                warmed = []
                for profile in npcs:
                    started = time.perf_counter()
                    result = backend.warm(profile.id, pipeline.warm_prompt(profile.id))
                    seconds = time.perf_counter() - started
                    warmed.append((profile.id, result.tokens, seconds))
            finally:
                backend.close()  # every file written
        finally:
            store.close()
    return [_described(npc_id, tokens, seconds, out) for npc_id, tokens, seconds in warmed]


def _load(store: MemoryStore, world: WorldDefinition, npcs: Sequence[NpcProfile]) -> None:
    loaded = store.load_world(world)
    if not loaded.committed:
        raise WarmError(f"the world was refused: {_reasons(loaded)}")
    for profile in npcs:
        registered = store.register_npc(profile)
        if not registered.committed:
            raise WarmError(f"NPC {profile.id!r} was refused: {_reasons(registered)}")


def _reasons(result: BatchResult) -> str:
    return "; ".join(refusal.reason for refusal in result.refusals) or "refused"


def _described(npc_id: str, tokens: int, seconds: float, out: Path) -> WarmedNpc:
    path = out / file_name(npc_id)
    if not path.is_file():  # the writer said why in the log (a read-only or full disk)
        raise WarmError(f"the prompt of {npc_id!r} could not be written to {out}; pass --out to a writable folder")
    with path.open("rb") as f:  # the tokens the file holds: the prefix, and the prompt after it up to the new message
        header, _ = read_header(f.read(1 << 16))
    held = int(header["n_tokens"])  # type: ignore[call-overload]
    return WarmedNpc(npc_id=npc_id, tokens=max(tokens, held), seconds=seconds, file=path, size_bytes=path.stat().st_size)


def read_world(path: Path) -> WorldDefinition:
    try:
        return WorldDefinition.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WarmError(f"{path}: {exc}") from None


def read_npcs(folder: Path) -> list[NpcProfile]:
    """Every `*.json` NPC profile in `folder`, by file name."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise WarmError(f"{folder} holds no NPC profiles (*.json)")
    out = []
    for path in files:
        try:
            out.append(NpcProfile.model_validate_json(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise WarmError(f"{path}: {exc}") from None
    return out
