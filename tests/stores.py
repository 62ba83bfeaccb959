"""One way to get a populated store on a real SQLite file, for every suite."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import Authority, MemoryWrite, NpcProfile, SetWorldState, WorldDefinition
from loreguard.schemas.base import JsonScalar
from loreguard.schemas.memory import WORLD_SCOPE
from loreguard.server.demo import demo_npcs, demo_world


def open_store(path: Path, *, world: WorldDefinition | None = None, npcs: Iterable[NpcProfile] = ()) -> MemoryStore:
    """A store at `path` with `world` loaded and `npcs` registered, each checked to commit."""
    store = MemoryStore(path)
    if world is not None:
        assert store.load_world(world).committed
    for profile in npcs:
        assert store.register_npc(profile).committed
    return store


def demo_store(path: Path, state: Mapping[str, JsonScalar] | None = None) -> MemoryStore:
    """The terminal demo's world and NPCs (the same data the Godot demo uses); `state`: world
    state the game set since (a labelled line's situation, say `{"curfew": true}`)."""
    store = open_store(path, world=demo_world(), npcs=demo_npcs())
    writes = [
        MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope=WORLD_SCOPE, key=k, value=v))
        for k, v in sorted((state or {}).items())
    ]
    assert not writes or store.apply(writes).committed
    return store


def guard_in_character_store(path: Path) -> MemoryStore:
    """The demo's world and NPCs, with the guard deciding the gate in character, as before the
    world's curfew rule decided it (`factories.guard_in_character`)."""
    from factories import guard_in_character

    return open_store(path, world=demo_world(), npcs=[guard_in_character(), *(p for p in demo_npcs() if p.id != "guard")])
