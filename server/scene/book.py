"""The scenes going on, and the ones that ended lately (so a late line gets a clear answer).

A `Scene` is the conversation's state: who is in it, the lines said (the transcript), who spoke
when. It changes only through `SceneBook`, under its lock. The sidecar runs a scene's lines
and words said in it in its NPCs' order (`scheduler`), so two changes to one scene never race;
the lock guards the book's map and `scene.end` from the socket thread.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from loreguard.schemas.interaction import InteractionContext, SceneLine, SceneMember, SceneTurn, TriggerReason
from loreguard.schemas.scene import SceneStartRequest, SceneState
from loreguard.server.scene.turns import named_in, next_speaker

#: Scenes kept after they end, so a line sent into one is told it ended (older: `not_found`).
ENDED_KEPT = 256
#: The most lines a speaker is told it heard since it last spoke (the schema's bound).
MAX_HEARD = 64


class SceneProblem(Exception):
    """A scene request that cannot be carried out; nothing was changed. `code` is the protocol's
    (`not_found`, `invalid`), `path` the request field at fault."""

    def __init__(self, code: Literal["not_found", "invalid"], path: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.path = path
        self.message = message

    def details(self) -> dict[str, object]:
        """The protocol error's details: `invalid` names the field as schema errors do."""
        if self.code == "invalid":
            return {"errors": [{"path": self.path, "reason": self.message}]}
        return {self.path: self.message}


@dataclass
class Scene:
    request: SceneStartRequest
    #: The memory's sequence number when the scene started: with its id, names this scene among
    #: all that used the id (its memories' tag), across restarts.
    run: int
    #: The speakers, then the listeners, with their names.
    members: tuple[SceneMember, ...]
    player_present: bool
    transcript: list[SceneLine] = field(default_factory=list)
    #: Per NPC: how many transcript lines there were when it last spoke.
    heard_upto: dict[str, int] = field(default_factory=dict)
    spoken: Counter[str] = field(default_factory=Counter)
    last_speaker: str | None = None
    #: The NPC the newest words named, who answers next.
    addressed: str | None = None
    #: Per NPC: who was there (and whether the player was) when it last spoke.
    told: dict[str, tuple[tuple[str, ...], bool]] = field(default_factory=dict)
    end_reason: Literal["max_lines", "ended_by_request"] | None = None

    @property
    def npc_ids(self) -> tuple[str, ...]:
        return tuple(m.npc_id for m in self.members)

    @property
    def lines(self) -> int:
        """NPC lines spoken so far."""
        return sum(self.spoken.values())

    @property
    def ended(self) -> bool:
        return self.end_reason is not None

    def next_speaker(self) -> str | None:
        if self.ended:
            return None
        return next_speaker(self.request.npcs, self.request.weights, self.spoken, self.last_speaker, self.addressed)

    def state(self) -> SceneState:
        return SceneState(
            scene_id=self.request.scene_id,
            npcs=self.request.npcs,
            listeners=self.request.listeners,
            player_present=self.player_present,
            lines=self.lines,
            max_lines=self.request.max_lines,
            next_speaker=self.next_speaker(),
            ended=self.ended,
            end_reason=self.end_reason,
        )

    def present(self, speaker: str | None) -> tuple[SceneMember, ...]:
        return tuple(m for m in self.members if m.npc_id != speaker)

    def company(self, present: tuple[SceneMember, ...]) -> tuple[tuple[str, ...], bool]:
        """Who is there besides a speaker, and whether the player is."""
        return tuple(m.npc_id for m in present), self.player_present

    def context(self, speaker: str) -> InteractionContext:
        """The interaction for `speaker`'s next line: what it heard since it last spoke, who hears
        it. Its trigger is the player's line when that was the last thing said."""
        heard = tuple(self.transcript[self.heard_upto.get(speaker, 0) :][-MAX_HEARD:])
        by_player = bool(heard) and heard[-1].kind == "player"
        present = self.present(speaker)
        return InteractionContext(
            npc_id=speaker,
            trigger_reason=TriggerReason.PLAYER_UTTERANCE if by_player else TriggerReason.NPC_INTERACTION,
            scene=self.request.location,
            scene_turn=SceneTurn(
                scene_id=self.request.scene_id,
                run=self.run,
                line=self.lines + 1,
                topic=self.request.topic,
                present=present,
                player_present=self.player_present,
                heard=heard,
                introduced=self.told.get(speaker) == self.company(present),
            ),
        )


class SceneBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scenes: OrderedDict[str, Scene] = OrderedDict()

    def start(self, request: SceneStartRequest, names: dict[str, str], run: int) -> SceneState:
        """Open a scene; `names` gives each of its NPCs' names (the caller checked they exist);
        `run` is the memory's sequence number now (`Scene.run`)."""
        members = tuple(SceneMember(npc_id=npc, name=names[npc]) for npc in request.npcs + request.listeners)
        scene = Scene(request=request, run=run, members=members, player_present=request.player_present)
        with self._lock:
            current = self._scenes.get(request.scene_id)
            if current is not None and not current.ended:
                raise SceneProblem("invalid", "scene_id", f"scene {request.scene_id!r} is going on; end it first")
            self._scenes.pop(request.scene_id, None)
            self._scenes[request.scene_id] = scene
            self._forget_ended()
            return scene.state()

    def get(self, scene_id: str, *, going_on: bool = True) -> Scene:
        """The scene; with `going_on`, `invalid` if it has ended. `not_found` if unknown."""
        with self._lock:
            scene = self._scenes.get(scene_id)
        if scene is None:
            raise SceneProblem("not_found", "scene_id", f"no scene {scene_id!r} is going on")
        if going_on and scene.ended:
            raise SceneProblem("invalid", "scene_id", f"scene {scene_id!r} has ended ({scene.end_reason})")
        return scene

    def end(self, scene_id: str) -> SceneState:
        scene = self.get(scene_id, going_on=False)
        with self._lock:
            if not scene.ended:
                scene.end_reason = "ended_by_request"
            return scene.state()

    def spoken(self, scene: Scene, speaker: str, dialogue: str, *, remembered: bool = True) -> None:
        """The speaker's line is said (an empty one, a clarify, still takes its turn). Not
        `remembered` (a fallback or clarify writes no exchange of the speaker's): what it heard,
        and its own line, come to it again with its next line, and so does the situation."""
        with self._lock:
            if dialogue:
                name = next(m.name for m in scene.members if m.npc_id == speaker)
                scene.transcript.append(SceneLine(kind="npc", npc_id=speaker, speaker=name, text=dialogue))
                scene.addressed = named_in(dialogue, scene.members[: len(scene.request.npcs)], speaker)
            else:
                scene.addressed = None
            if remembered:
                scene.heard_upto[speaker] = len(scene.transcript)
                scene.told[speaker] = scene.company(scene.present(speaker))
            scene.spoken[speaker] += 1
            scene.last_speaker = speaker
            if scene.lines >= scene.request.max_lines and not scene.ended:
                scene.end_reason = "max_lines"

    def said(self, scene: Scene, line: SceneLine, to: str | None) -> None:
        """Words said into the scene: heard by all; the NPC they are for (or name) answers next."""
        with self._lock:
            scene.transcript.append(line)
            if line.kind == "player":
                scene.player_present = True
            speakers = scene.members[: len(scene.request.npcs)]
            scene.addressed = to if to is not None else named_in(line.text, speakers, None)
            scene.last_speaker = None  # the last to speak is not an NPC now: any may answer

    def _forget_ended(self) -> None:
        ended = [scene_id for scene_id, scene in self._scenes.items() if scene.ended]
        for scene_id in ended[: max(0, len(ended) - ENDED_KEPT)]:
            del self._scenes[scene_id]
