"""Build a governance pipeline on a real SQLite store with a scripted model."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from factories import rich_guard_profile, rich_world
from stores import open_store

from loreguard.schemas import InteractionContext, NpcProfile, WorldDefinition
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig


def make_pipeline(
    path: Path,
    outputs: Iterable[str] = (),
    *,
    profile: NpcProfile | None = None,
    world: WorldDefinition | None = None,
    config: PipelineConfig | None = None,
) -> tuple[GovernancePipeline, ScriptedBackend]:
    store = open_store(path, world=world or rich_world(), npcs=[profile or rich_guard_profile()])
    backend = ScriptedBackend(list(outputs))
    return GovernancePipeline(store, backend, config), backend


def ask(text: str, npc: str = "guard", trigger: str = "player_utterance", **extra: object) -> InteractionContext:
    return InteractionContext.model_validate({"npc_id": npc, "trigger_reason": trigger, "player_input": text, **extra})
