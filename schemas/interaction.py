"""Stage 1 input: the interaction context the game sends. Untrusted by design."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import Field, StringConstraints

from loreguard.schemas.base import FrozenModel, Identifier


class TriggerReason(str, Enum):
    """Why the NPC is speaking now."""

    PLAYER_UTTERANCE = "player_utterance"
    ZONE_TRIGGER = "zone_trigger"
    TIME_TRIGGER = "time_trigger"
    QUEST_TRIGGER = "quest_trigger"
    NPC_INTERACTION = "npc_interaction"
    WORLD_EVENT = "world_event"
    CUSTOM = "custom"


class TaskType(str, Enum):
    """What an interaction is about, as the sidecar classifies it (trigger and keywords); it
    decides which memory the prompt carries, and rules may apply to some task types only."""

    LORE_QUESTION = "lore_question"
    QUEST = "quest"
    TRADE = "trade"
    SMALL_TALK = "small_talk"
    AMBIENT = "ambient"
    WORLD_EVENT = "world_event"
    NPC_EXCHANGE = "npc_exchange"


Tag = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class InteractionContext(FrozenModel):
    """One request for an NPC line. Everything here comes from the game and is untrusted:
    it selects rules and memory, but it can never grant authority."""

    npc_id: Identifier
    trigger_reason: TriggerReason
    player_input: Annotated[str, StringConstraints(max_length=2000)] = ""
    scene: Annotated[str, StringConstraints(max_length=128)] = ""
    tags: tuple[Tag, ...] = Field(default=(), max_length=32)
    #: The game's own count, informational only: the sidecar keeps the authoritative count.
    interaction_count: int = Field(default=0, ge=0, le=2**53)
    #: Extra instruction text for this trigger (e.g. "greet the player who just entered").
    trigger_prompt: Annotated[str, StringConstraints(max_length=2000)] = ""
    #: Extra example text for this trigger, placed beside the profile's few-shot examples.
    few_shot_text: Annotated[str, StringConstraints(max_length=4000)] = ""
    #: Who else is involved (for npc_interaction triggers).
    other_npc_id: Identifier | None = None
