"""Stage 9 (last resort): author-controlled fallback lines.

Order: the NPC's lines for this trigger, the world's lines for this trigger, the NPC's generic
lines, the world's generic lines, then the world's emergency line. The choice within a list is
by interaction index, never random, so a replay picks the same line. A fallback never changes
memory.
"""

from __future__ import annotations

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.interaction import TriggerReason
from loreguard.schemas.npc import NpcProfile, WorldDefinition

BUILTIN_EMERGENCY = "..."


class FallbackChoice(FrozenModel):
    text: str
    source: str


def choose_fallback(
    profile: NpcProfile, world: WorldDefinition | None, trigger: TriggerReason, interaction_index: int
) -> FallbackChoice:
    candidates: list[tuple[str, tuple[str, ...]]] = [("npc_trigger", profile.fallbacks.by_trigger.get(trigger, ()))]
    if world is not None:
        candidates.append(("world_trigger", world.fallbacks.by_trigger.get(trigger, ())))
    candidates.append(("npc_generic", profile.fallbacks.generic))
    if world is not None:
        candidates.append(("world_generic", world.fallbacks.generic))
    for source, lines in candidates:
        if lines:
            return FallbackChoice(text=lines[interaction_index % len(lines)], source=source)
    return FallbackChoice(text=world.emergency_fallback if world else BUILTIN_EMERGENCY, source="emergency")
