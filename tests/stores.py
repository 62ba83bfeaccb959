"""One way to get a populated store on a real SQLite file, for every suite."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import NpcProfile, WorldDefinition
from loreguard.server.demo import demo_npcs, demo_world


def open_store(path: Path, *, world: WorldDefinition | None = None, npcs: Iterable[NpcProfile] = ()) -> MemoryStore:
    """A store at `path` with `world` loaded and `npcs` registered, each checked to commit."""
    store = MemoryStore(path)
    if world is not None:
        assert store.load_world(world).committed
    for profile in npcs:
        assert store.register_npc(profile).committed
    return store


def demo_store(path: Path) -> MemoryStore:
    """The terminal demo's world and NPCs (the same data the Godot demo uses)."""
    return open_store(path, world=demo_world(), npcs=demo_npcs())
