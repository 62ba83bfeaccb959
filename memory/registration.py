"""Designer registration as memory writes: a profile's or a world's facts, and the world's initial state."""

from __future__ import annotations

from loreguard.schemas.memory import WORLD_SCOPE, AddCanonicalFact, Authority, MemoryWrite, ScopeMemory, SetWorldState
from loreguard.schemas.npc import NpcProfile, WorldDefinition


def profile_writes(profile: NpcProfile) -> list[MemoryWrite]:
    """The profile's canonical facts, by id (ids in the listed order would vary)."""
    return [
        MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=profile.id, fact=fact))
        for fact in sorted(profile.canonical_facts, key=lambda f: f.id)
    ]


def world_writes(world: WorldDefinition, current: ScopeMemory) -> list[MemoryWrite]:
    """The world's lore facts, by id, and its initial state for the keys `current` (the world's
    memory) has not set yet: a reload never rolls back game progress."""
    writes = [
        MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=WORLD_SCOPE, fact=fact))
        for fact in sorted(world.canonical_facts, key=lambda f: f.id)
    ]
    writes += [
        MemoryWrite(source=Authority.DESIGNER, op=SetWorldState(scope=WORLD_SCOPE, key=key, value=value))
        for key, value in sorted(world.initial_state.items())
        if current.state_value(key) is None
    ]
    return writes
