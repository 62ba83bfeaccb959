"""Speaking a scene's lines, and putting words said into a scene into the memory of those present.

Each NPC line is one interaction of its speaker through the governance pipeline: the speaker's
own persona, canon, rules, secrets and memory, the scene so far as the conversation, the same
gate. Its commit also writes the line to the memory of every other NPC present, in the same
transaction (`GovernancePipeline`, `mutation.heard_writes`). The caller runs a scene's work in
the order of all its NPCs (`scheduler`), so a scene's line and a one-NPC interaction of one of
its NPCs never overlap.
"""

from __future__ import annotations

from collections.abc import Callable

from loreguard.memory import StorageUnavailableError
from loreguard.schemas.interaction import InteractionContext, SceneLine, SceneTurn
from loreguard.schemas.memory import Authority
from loreguard.schemas.receipt import InteractionOutcome
from loreguard.schemas.scene import SceneLineResult, SceneNextReply, SceneSayRequest, SceneState
from loreguard.server.pipeline import DeadlineExceeded, GovernancePipeline, InteractionCancelled, LifecycleHalt
from loreguard.server.pipeline.mutation import heard_writes
from loreguard.server.pipeline.running.cancel import Cancellation
from loreguard.server.pipeline.running.streaming import StreamSession
from loreguard.server.scene.book import Scene, SceneBook, SceneProblem
from loreguard.server.scene.turns import next_speaker
from loreguard.text.phrases import clean_dialogue

#: Makes the stream session of a line (its number, its speaker), or None not to stream.
StreamFor = Callable[[int, str], StreamSession | None]
#: Why a `to_end` run stopped before the scene's end, by the error that stopped it.
_STOPPED: dict[type, str] = {
    DeadlineExceeded: "timeout",
    LifecycleHalt: "halted",
    StorageUnavailableError: "storage_unavailable",
    InteractionCancelled: "cancelled",
}
#: Told the context of the line expected next, while the current one streams: the sidecar
#: evaluates that speaker's prompt into the model's cache meanwhile (`Warmer`).
Prefetch = Callable[[InteractionContext], None]


class SceneRunner:
    def __init__(self, pipeline: GovernancePipeline, book: SceneBook) -> None:
        self.pipeline = pipeline
        self.book = book

    def next_line(
        self,
        scene: Scene,
        *,
        deadline_ns: int | None = None,
        stream: StreamFor | None = None,
        prefetch: Prefetch | None = None,
        cancel: Cancellation | None = None,
    ) -> SceneLineResult:
        """Speak the scene's next line. `SceneProblem` when it has ended; the pipeline's errors
        (`DeadlineExceeded`, `LifecycleHalt`...) leave the scene as it was. `scene` is the very
        scene asked for: its id may name a newer scene by now, with other NPCs. `cancel` (the
        scene's end, the game's cancel) stops the line before it commits: no NPC remembers it."""
        if scene.ended:
            raise SceneProblem("invalid", "scene_id", f"scene {scene.request.scene_id!r} has ended ({scene.end_reason})")
        speaker = scene.next_speaker()
        assert speaker is not None  # a scene going on always has one
        context = scene.context(speaker)
        turn = context.scene_turn
        assert turn is not None
        session = stream(turn.line, speaker) if stream is not None else None
        if prefetch is not None:
            # The next speaker's prompt up to its new message does not depend on this line: its
            # evaluation runs beside this line's generation (the engine gives way to the line).
            self._prefetch_next(scene, speaker, prefetch)
        result = self.pipeline.interact(context, deadline_ns=deadline_ns, stream=session, cancel=cancel)
        self.book.spoken(scene, speaker, result.dialogue, remembered=result.receipt.outcome is InteractionOutcome.VALIDATED)
        return SceneLineResult(line=turn.line, speaker=speaker, result=result)

    def run(
        self,
        scene: Scene,
        *,
        to_end: bool,
        deadline_ns: Callable[[], int | None] = lambda: None,
        stream: StreamFor | None = None,
        prefetch: Prefetch | None = None,
        cancel: Cancellation | None = None,
    ) -> SceneNextReply:
        """One line, or (`to_end`) every line until the scene ends. Each line gets its own
        deadline. Lines spoken stand: when a later one cannot be spoken (its deadline, a halt,
        the audit log, the scene ended meanwhile), the reply holds the earlier ones and says why
        it stopped; only a first line's failure is the request's error."""
        lines: list[SceneLineResult] = []
        stopped: str | None = None
        while not stopped:
            try:
                lines.append(self.next_line(scene, deadline_ns=deadline_ns(), stream=stream, prefetch=prefetch, cancel=cancel))
            except (DeadlineExceeded, LifecycleHalt, StorageUnavailableError, SceneProblem, InteractionCancelled) as exc:
                if not lines:
                    raise
                stopped = next((why for kind, why in _STOPPED.items() if isinstance(exc, kind)), "ended")
                break
            if not to_end or scene.ended:
                break
        return SceneNextReply(lines=tuple(lines), scene=scene.state(), stopped=stopped)

    def say(self, scene: Scene, request: SceneSayRequest) -> SceneState:
        """Words said into the scene: one memory for each NPC present, then the scene goes on
        with them (the NPC they are for answers next). Nothing changes on a refusal."""
        if scene.ended:
            raise SceneProblem("invalid", "scene_id", f"scene {request.scene_id!r} has ended ({scene.end_reason})")
        if request.kind == "player" and not scene.request.player_may_join:
            raise SceneProblem("invalid", "kind", f"the player may not join scene {request.scene_id!r}")
        if request.to is not None and request.to not in scene.request.npcs:
            raise SceneProblem("invalid", "to", f"{request.to!r} is not one of the scene's speakers")
        text = clean_dialogue(request.text)
        if not text:
            raise SceneProblem("invalid", "text", "nothing is left of the text once cleaned")
        line = SceneLine(kind=request.kind, speaker="Player" if request.kind == "player" else "Narrator", text=text)
        store = self.pipeline.store
        turn = SceneTurn(scene_id=scene.request.scene_id, run=scene.run, line=max(1, scene.lines), present=scene.members)
        result = store.apply(heard_writes(turn, line, [store.scope(npc) for npc in scene.npc_ids], Authority.GAME_SYSTEM))
        if not result.committed:
            raise RuntimeError(f"memory refused what was said in scene {request.scene_id!r}: {result.refusals}")
        self.book.said(scene, line, request.to)
        return scene.state()

    @staticmethod
    def _prefetch_next(scene: Scene, speaker: str, prefetch: Prefetch) -> None:
        """Tell `prefetch` who will most likely speak after `speaker`: the rotation's choice if
        this line names nobody."""
        if scene.lines + 1 >= scene.request.max_lines:
            return
        spoken = scene.spoken.copy()
        spoken[speaker] += 1
        following = next_speaker(scene.request.npcs, scene.request.weights, spoken, speaker, None)
        if following != speaker:
            prefetch(scene.context(following))
