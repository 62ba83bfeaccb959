"""The demo world and NPCs: one source of truth (JSON in `data/`) for the terminal demo and the
Godot demo project."""

from __future__ import annotations

from importlib import resources

from loreguard.schemas import NpcProfile, WorldDefinition

DEMO_NPCS = ("guard", "merchant")


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("data", name).read_text(encoding="utf-8")


def demo_world() -> WorldDefinition:
    return WorldDefinition.model_validate_json(_read("world.json"))


def demo_npcs() -> tuple[NpcProfile, ...]:
    return tuple(NpcProfile.model_validate_json(_read(f"npcs/{npc_id}.json")) for npc_id in DEMO_NPCS)
