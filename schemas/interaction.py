"""Stage 1 input: the interaction context the game sends. Untrusted by design."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer

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
SceneText = Annotated[str, StringConstraints(max_length=2000)]
#: A scene's topic or situation, as the designer or the game wrote it.
SceneTopic = Annotated[str, StringConstraints(max_length=500)]


class SceneMember(FrozenModel):
    """An NPC in a scene, with the name the others know it by."""

    npc_id: Identifier
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]


class SceneLine(FrozenModel):
    """One line said in a scene, as those present heard it."""

    #: `npc`: an NPC's validated line; `player`: the player's; `narration`: the game's (what
    #: happens, not anybody's words).
    kind: Literal["npc", "player", "narration"]
    #: The NPC who said it (kind `npc` only).
    npc_id: Identifier | None = None
    #: Who it is attributed to: the NPC's name, `Player`, or `Narrator`.
    speaker: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    text: SceneText


class SceneTurn(FrozenModel):
    """Where a line stands in a scene (`scene.next`): set by the sidecar, never by a client.
    The speaker answers what it `heard`, and the line goes to the memory of everyone `present`."""

    scene_id: Identifier
    #: The memory's sequence number when the scene started: with `scene_id`, names this scene
    #: among all that used the id (the tag of its memories).
    run: int = Field(default=0, ge=0)
    #: This line's number among the scene's lines (1 for the first).
    line: int = Field(ge=1, le=1000)
    topic: SceneTopic = ""
    #: The other NPCs present (not the speaker), in the scene's order: each hears the line.
    present: tuple[SceneMember, ...] = Field(default=(), max_length=16)
    #: Whether the player is there to hear it.
    player_present: bool = False
    #: What was said since the speaker last spoke (since the scene began, before its first
    #: line), oldest first.
    heard: tuple[SceneLine, ...] = Field(default=(), max_length=64)
    #: The speaker was told the situation (who is there, the topic) in its last line of this
    #: scene and who is there has not changed since: the prompt shows only what it heard, since
    #: the conversation holds the situation already (and the engine has it cached).
    introduced: bool = False

    def player_words(self) -> str:
        """What the player said among the lines heard, one line per row."""
        return "\n".join(line.text for line in self.heard if line.kind == "player")


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
    #: A line of a scene (`scene.next`); None for a one-NPC interaction.
    scene_turn: SceneTurn | None = None

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A context outside a scene serializes as it did before scenes existed, so the hashes
        # and records of those interactions do not change.
        data: dict[str, Any] = handler(self)
        if data.get("scene_turn", 0) is None:
            del data["scene_turn"]
        return data

    def said(self) -> str:
        """What the NPC answers: the player's line, or in a scene every line it heard since it
        last spoke (the player's among them), one per row."""
        if self.scene_turn is None:
            return self.player_input
        return "\n".join(line.text for line in self.scene_turn.heard)
