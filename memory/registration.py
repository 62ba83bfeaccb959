"""Designer registration as memory writes: a profile's or a world's facts, and the world's initial state."""

from __future__ import annotations

from collections.abc import Mapping

from loreguard.schemas.memory import (
    WORLD_SCOPE,
    AddCanonicalFact,
    Authority,
    CanonicalFact,
    Claim,
    MemoryWrite,
    ScopeMemory,
    SetWorldState,
)
from loreguard.schemas.npc import NpcProfile, Person, WorldDefinition
from loreguard.schemas.text import fold


def profile_writes(profile: NpcProfile) -> list[MemoryWrite]:
    """The profile's canonical facts, by id (ids in the listed order would vary)."""
    return [
        MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=profile.id, fact=fact))
        for fact in sorted(profile.canonical_facts, key=lambda f: f.id)
    ]


def world_writes(world: WorldDefinition, current: ScopeMemory) -> list[MemoryWrite]:
    """The world's lore facts, by id, and its initial state for the keys `current` (the world's
    memory) has not set yet: a reload never rolls back game progress."""
    facts = (*world.canonical_facts, *people_facts(world.people))
    writes = [
        MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=WORLD_SCOPE, fact=fact))
        for fact in sorted(facts, key=lambda f: f.id)
    ]
    writes += [
        MemoryWrite(source=Authority.DESIGNER, op=SetWorldState(scope=WORLD_SCOPE, key=key, value=value))
        for key, value in sorted(world.initial_state.items())
        if current.state_value(key) is None
    ]
    return writes


def people_facts(people: Mapping[str, Person]) -> tuple[CanonicalFact, ...]:
    """Each of the world's people as a canonical fact, `person.<npc id>`: "Brom is the guard at
    the north gate." Its claims make a reply that names the role's holder otherwise ("the guard
    is named Arthur"; only for a role one person holds) or gives the person another's role ("Brom
    is the merchant") contradict it."""
    roles = {fold(p.role) for p in people.values()}
    holders = [fold(p.role) for p in people.values()]
    facts = []
    for npc_id, person in sorted(people.items()):
        claims = []
        if holders.count(fold(person.role)) == 1:
            claims.append(Claim(subject=person.role, attribute="name", value=person.name))
        others = tuple(sorted(roles - {fold(person.role)}))
        if others:
            claims.append(Claim(subject=person.name, attribute="role", value=person.role, other_values=others))
        where = f" {person.where.strip()}" if person.where.strip() else ""
        text = f"{person.name} is the {person.role}{where}."
        facts.append(CanonicalFact(id=f"person.{npc_id}", text=text, claims=tuple(claims)))
    return tuple(facts)
