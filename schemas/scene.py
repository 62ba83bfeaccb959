"""Scenes on the wire: NPCs talking to each other, and to the player, in one conversation.

`scene.start` names who is there; `scene.next` asks for the next line (or every line to the
scene's end); `scene.say` puts the player's (or the game's) words into it; `scene.end` closes
it. Each NPC line is an interaction of its speaker, governed and recorded like any other
(docs/scenes.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StringConstraints

from loreguard.schemas.base import FrozenModel, Identifier
from loreguard.schemas.interaction import SceneText, SceneTopic
from loreguard.schemas.receipt import InteractionResult

#: The most NPCs one scene holds, speakers and listeners together.
MAX_SCENE_NPCS = 8
MAX_SCENE_LINES = 64


class SceneStartRequest(FrozenModel):
    """Open a scene. Its NPCs take turns in a rotation weighted by `weights`; a line that names
    another NPC present hands the next turn to that NPC."""

    scene_id: Identifier
    #: The NPCs who speak, in the rotation's order.
    npcs: tuple[Identifier, ...] = Field(min_length=1, max_length=MAX_SCENE_NPCS)
    #: NPCs present who listen but do not speak: they remember what they heard.
    listeners: tuple[Identifier, ...] = Field(default=(), max_length=MAX_SCENE_NPCS)
    #: The player is there from the start, hearing every line.
    player_present: StrictBool = False
    #: Whether the player may say something into the scene (`scene.say`); saying something
    #: makes the player present.
    player_may_join: StrictBool = True
    #: What the scene is about, or the situation, as the NPCs are told it.
    topic: SceneTopic = ""
    #: Where it happens (the interaction's `scene` label, which rules may select on).
    location: Annotated[str, StringConstraints(max_length=128)] = ""
    #: NPC lines after which the scene ends by itself.
    max_lines: int = Field(default=8, ge=1, le=MAX_SCENE_LINES)
    #: Turn weights by NPC id (default 1): an NPC with weight 2 speaks about twice as often.
    weights: dict[Identifier, Annotated[float, Field(gt=0, le=100)]] = Field(default_factory=dict, max_length=MAX_SCENE_NPCS)


class SceneState(FrozenModel):
    """Where a scene stands."""

    scene_id: Identifier
    npcs: tuple[Identifier, ...]
    listeners: tuple[Identifier, ...]
    player_present: bool
    #: NPC lines spoken so far, and the most the scene allows.
    lines: int
    max_lines: int
    #: Who speaks next (None once the scene has ended).
    next_speaker: Identifier | None
    ended: bool
    #: `max_lines`, `ended_by_request`; None while the scene goes on.
    end_reason: Literal["max_lines", "ended_by_request"] | None = None


class SceneIdRequest(FrozenModel):
    scene_id: Identifier


class SceneNextRequest(FrozenModel):
    scene_id: Identifier
    #: True: the lines come as `scene.next.chunk` replies as each piece passes the gate.
    stream: StrictBool = False
    #: True: every line to the scene's end (`max_lines`) in one reply; false: one line.
    to_end: StrictBool = False


class SceneLineResult(FrozenModel):
    """One NPC line of a scene: its speaker's interaction result, as `interact` answers it."""

    #: The line's number among the scene's NPC lines (1 for the first).
    line: int
    speaker: Identifier
    result: InteractionResult


class SceneNextReply(FrozenModel):
    lines: tuple[SceneLineResult, ...]
    scene: SceneState
    #: With `to_end`: why the lines stopped before the scene's end (`timeout`, `halted`,
    #: `storage_unavailable`: the disk refused the next line's write, `ended`: ended meanwhile,
    #: `cancelled`: `interact.cancel` or `scene.end` stopped the line being spoken);
    #: the lines spoken stand. None otherwise.
    stopped: Literal["timeout", "halted", "storage_unavailable", "ended", "cancelled"] | None = None


class SceneChunk(FrozenModel):
    """One `scene.next.chunk`: a validated piece of a line as it streams (see `InteractChunk`)."""

    line: int = Field(ge=1)
    speaker: Identifier
    seq: int = Field(ge=0)
    text: str
    attempt: int = Field(ge=0)


class SceneSayRequest(FrozenModel):
    """Words said into the scene: every NPC present hears them and remembers them (one memory
    each). An NPC named by `to` (or by name in the text) answers next."""

    scene_id: Identifier
    text: Annotated[SceneText, StringConstraints(min_length=1)]
    #: `player`: the player speaks (allowed when the scene lets the player join); `narration`:
    #: the game says what happens ("The bell tolls.").
    kind: Literal["player", "narration"] = "player"
    #: The NPC the words are for: it speaks next.
    to: Identifier | None = None
