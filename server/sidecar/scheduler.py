"""The interaction scheduler: different NPCs at once, each NPC's interactions in arrival order.

Jobs wait in one bounded queue in arrival order. Each of `workers` threads takes the oldest job
whose NPC has nothing running, so interactions of one NPC apply strictly in the order they
arrived while other NPCs proceed in parallel (the batched engine decodes their generations in
the same steps). With one worker this is the plain FIFO a reproducible backend needs. The socket
loop never waits for it; finished replies come back through `deliver`. When no interaction
waits or runs, a worker consolidates the memory of an NPC near its limit (`ConsolidateJob`), in
that NPC's place in the order: its next interaction waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import BaseModel

from loreguard.memory import StorageUnavailableError, UnknownScopeError
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.scene import SceneChunk, SceneNextRequest, SceneSayRequest
from loreguard.schemas.wire import ErrorCode, InteractChunk, encode_chunk
from loreguard.server.pipeline import (
    DeadlineExceeded,
    GovernancePipeline,
    InteractionCancelled,
    LifecycleHalt,
    UnknownNpcError,
    summaries,
)
from loreguard.server.pipeline.running.cancel import CancelSwitch
from loreguard.server.pipeline.running.streaming import ReleasedChunk, StreamSession
from loreguard.server.scene import Scene, SceneProblem, SceneRunner
from loreguard.server.sidecar.codec import encode_error, encode_reply, internal_error, storage_error
from loreguard.server.sidecar.stats import SidecarStats


@dataclass(frozen=True)
class InteractJob:
    client: bytes
    request_id: int | str
    context: InteractionContext
    received_ns: int
    deadline_ns: int
    #: Send each validated chunk as `interact.chunk` before the reply.
    stream: bool = False
    #: Set by `interact.cancel` (`InteractionScheduler.cancel`).
    cancel: CancelSwitch = field(default_factory=CancelSwitch)

    @property
    def npcs(self) -> tuple[str, ...]:
        return (self.context.npc_id,)


@dataclass(frozen=True)
class SceneJob:
    """A scene's next line(s) (`scene.next`) or words said into it (`scene.say`). It holds every
    NPC of the scene, so it runs in each one's order: after their earlier interactions, before
    their later ones."""

    client: bytes
    request_id: int | str
    request: SceneNextRequest | SceneSayRequest
    #: The scene asked for (its id may name a newer scene by the time the job runs).
    scene: Scene
    npcs: tuple[str, ...]
    received_ns: int
    #: Nanoseconds a line may take, from its start (from arrival for the first).
    timeout_ns: int
    #: Set by `interact.cancel` or the scene's end: the line running stops and is not remembered.
    cancel: CancelSwitch = field(default_factory=CancelSwitch)


@dataclass(frozen=True)
class ConsolidateJob:
    """Summarise what the NPC is about to forget (`GovernancePipeline.consolidate`): idle-time work."""

    npc_id: str


Deliver = Callable[[bytes, bytes], None]
T = TypeVar("T")
#: Requests of a client, by (client, request id).
_Key = tuple[bytes, int | str]
#: How many finished requests `cancel` still tells from ones it never saw.
_FINISHED_KEPT = 1024
_log = logging.getLogger("loreguard.sidecar")


class InteractionScheduler:
    def __init__(
        self,
        pipeline: GovernancePipeline,
        *,
        workers: int,
        queue_size: int,
        deliver: Deliver,
        is_connected: Callable[[bytes], bool],
        stats: SidecarStats,
        scenes: SceneRunner | None = None,
        prefetch: Callable[[InteractionContext], None] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("the scheduler needs at least one worker")
        self._pipeline = pipeline
        self._queue_size = queue_size
        self._deliver = deliver
        self._is_connected = is_connected
        self._stats = stats
        self._scenes = scenes
        #: Told the next scene line's context while a line runs (the sidecar warms its prompt).
        self._prefetch = prefetch
        self._cond = threading.Condition()
        self._pending: deque[InteractJob | SceneJob] = deque()
        #: NPCs whose memory is near its limit, to consolidate when no interaction waits or runs.
        self._idle_work: deque[str] = deque()
        #: NPCs with an interaction running now.
        self._running: set[str] = set()
        #: Jobs queued or running, by request; the last ones finished (`cancel` says `finished`).
        self._live: dict[_Key, InteractJob | SceneJob] = {}
        self._finished: OrderedDict[_Key, None] = OrderedDict()
        self._closed = False
        #: Shutdown stopped waiting for interactions still running (`shutdown`'s grace ran out):
        #: the store and sockets close under them, and nothing they end with can be answered.
        self._abandoned = False
        self.workers = workers
        self._threads = [threading.Thread(target=self._run, name=f"loreguard-interact-{i}", daemon=True) for i in range(workers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._pending)

    def submit(self, job: InteractJob | SceneJob) -> bool:
        """Queue a job; False when the queue is full (the caller answers `overloaded`)."""
        with self._cond:
            if self._closed or len(self._pending) >= self._queue_size:
                return False
            self._pending.append(job)
            self._live[(job.client, job.request_id)] = job
            self._cond.notify_all()
        return True

    def cancel(self, client: bytes, request_id: int | str) -> Literal["queued", "running", "finished"] | None:
        """Cancel the client's request (`interact.cancel`): dropped from the queue and answered
        `cancelled` at once, or stopped where it runs (it answers `cancelled` itself). `finished`:
        it committed, or commits now; None: no such request of this client."""
        key = (client, request_id)
        with self._cond:
            job = self._live.get(key)
            if job is None:
                return "finished" if key in self._finished else None
            queued = job in self._pending
            if queued:
                self._pending.remove(job)
                self._finish(key)
                self._cond.notify_all()
            stopped = job.cancel.cancel("game")
        if queued:
            self._stats.count("interact.cancelled_queued")
            self._deliver(client, _cancelled(request_id, "game", "queued"))
            return "queued"
        return "running" if stopped else "finished"

    def end_scene(self, scene_id: str) -> None:
        """The scene ended (`scene.end`): its line running is not remembered, and no line of it
        queued is spoken (each answers `cancelled`)."""
        with self._cond:
            jobs = [job for job in self._live.values() if isinstance(job, SceneJob) and job.scene.request.scene_id == scene_id]
        for job in jobs:
            job.cancel.cancel("scene_end")

    def _finish(self, key: _Key) -> None:
        """The request is no longer live (the caller holds the lock)."""
        self._live.pop(key, None)
        self._finished[key] = None
        if len(self._finished) > _FINISHED_KEPT:
            self._finished.popitem(last=False)

    def shutdown(self, timeout_s: float) -> None:
        """Refuse queued jobs with a typed error, let the running ones finish, stop the threads."""
        with self._cond:
            self._closed = True
            refused = list(self._pending)
            self._pending.clear()
            self._idle_work.clear()
            self._cond.notify_all()
        for job in refused:
            self._stats.count("interact.refused_shutdown")
            self._deliver(job.client, encode_error(job.request_id, ErrorCode.OVERLOADED, "the sidecar is shutting down"))
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        running = sum(thread.is_alive() for thread in self._threads)
        if running:
            self._abandoned = True
            _log.warning(
                "%d interaction(s) still running after the %g s shutdown grace: they will not be answered", running, timeout_s
            )

    def _take(self) -> InteractJob | SceneJob | ConsolidateJob | None:
        """The oldest job whose NPCs are all idle and not waited for by an older job, waiting for
        one; with no interaction queued or running, an NPC's consolidation; None once shut down."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                held = set(self._running)
                for job in self._pending:
                    if held.isdisjoint(job.npcs):
                        self._pending.remove(job)
                        self._running.update(job.npcs)
                        return job
                    held.update(job.npcs)  # a later job of these NPCs waits for this one
                if self._idle_work and not self._pending and not self._running:
                    npc_id = self._idle_work.popleft()
                    self._running.add(npc_id)  # the NPC's next interaction waits for it
                    return ConsolidateJob(npc_id)
                self._cond.wait()

    def _done(self, npcs: tuple[str, ...]) -> None:
        with self._cond:
            self._running.difference_update(npcs)
            self._cond.notify_all()

    def _run(self) -> None:
        while (job := self._take()) is not None:
            if isinstance(job, ConsolidateJob):
                try:
                    self._consolidate(job.npc_id)
                finally:
                    self._done((job.npc_id,))
                continue
            try:
                if not self._is_connected(job.client):
                    self._stats.count("interact.dropped_disconnected")
                    continue
                if job.cancel.by is not None:  # cancelled before it began (the scene ended): nothing ran
                    self._deliver(job.client, _cancelled(job.request_id, job.cancel.by, "queued"))
                    continue
                reply = self._execute(job) if isinstance(job, InteractJob) else self._execute_scene(job)
                if reply is not None:
                    self._deliver(job.client, reply)
            finally:
                with self._cond:
                    self._finish((job.client, job.request_id))
                self._done(job.npcs)
            for npc_id in job.npcs:
                self._queue_consolidation_if_due(npc_id)

    def _queue_consolidation_if_due(self, npc_id: str) -> None:
        store = self._pipeline.store
        try:
            due = summaries.due(store.scope(npc_id), store.policy)
        except UnknownScopeError:
            return
        if due:
            with self._cond:
                if npc_id not in self._idle_work:
                    self._idle_work.append(npc_id)
                    self._cond.notify_all()

    def _consolidate(self, npc_id: str) -> None:
        try:
            result = self._pipeline.consolidate(npc_id)
        except StorageUnavailableError:  # logged by the memory file; the next due pass tries again
            self._stats.count("consolidation.storage_unavailable")
            return
        except Exception:  # a bug: keep serving; memory is bounded by the store's own consolidation
            self._stats.count("internal_errors")
            _log.exception("consolidation of %s failed", npc_id)
            return
        if result is not None:
            self._stats.count("consolidation.written" if not result.fallback_used else "consolidation.refused")

    def _stream(self, job: InteractJob) -> StreamSession:
        """Chunks go out as they are released; the generation stops when the client leaves."""

        def emit(chunk: ReleasedChunk) -> None:
            body = InteractChunk(seq=chunk.seq, text=chunk.text, attempt=chunk.attempt)
            self._deliver(job.client, encode_chunk(job.request_id, "interact", body))
            self._stats.count("interact.chunks")

        return StreamSession(emit=emit, wanted=lambda: self._is_connected(job.client))

    def _execute(self, job: InteractJob) -> bytes | None:
        """The reply frame; None when a streaming client left (no one to answer)."""
        started = time.perf_counter_ns()
        self._stats.observe("queue_wait", (started - job.received_ns) // 1000)
        if started > job.deadline_ns:
            self._stats.count("interact.timeout")
            return encode_error(job.request_id, ErrorCode.TIMEOUT, "the deadline passed while the request was queued")
        stream = self._stream(job) if job.stream else None
        outcome = self._guarded(
            job.request_id,
            f"interact for {job.context.npc_id}",
            lambda: self._pipeline.interact(job.context, deadline_ns=job.deadline_ns, stream=stream, cancel=job.cancel),
            job.context.npc_id,
        )
        if not isinstance(outcome, InteractionResult):
            return outcome
        result = outcome
        self._stats.observe("interact", (time.perf_counter_ns() - job.received_ns) // 1000)
        self._stats.count(f"interact.{result.receipt.outcome.value}")
        return encode_reply(job.request_id, "interact", result)

    def _guarded(self, request_id: int | str, what: str, work: Callable[[], T], npc_id: str | None = None) -> T | bytes | None:
        """`work`'s result, or the error frame its failure answers (None: a streaming client
        left, and no one is there to answer). `npc_id`: the NPC a `not_found` names."""
        try:
            return work()
        except InteractionCancelled as cancelled:
            if cancelled.by == "client_left":
                self._stats.count("interact.cancelled_disconnected")
                return None
            self._stats.count(f"interact.cancelled_{cancelled.by}")
            return _cancelled(request_id, cancelled.by, cancelled.phase, cancelled.audit_record_id)
        except UnknownNpcError as exc:
            return encode_error(request_id, ErrorCode.NOT_FOUND, str(exc), {"npc_id": npc_id} if npc_id else None)
        except SceneProblem as problem:
            return encode_error(request_id, ErrorCode(problem.code), problem.message, problem.details())
        except DeadlineExceeded as exc:
            self._stats.count("interact.timeout")
            return encode_error(request_id, ErrorCode.TIMEOUT, str(exc))
        except StorageUnavailableError as exc:
            # Not a bug: the disk refused the write, rolled back whole. Nothing is remembered of
            # the line (nor a fallback as said), and the game hears why.
            self._stats.count("interact.storage_unavailable")
            return storage_error(request_id, exc)
        except LifecycleHalt as halt:
            # An invariant broke: nothing was applied, and the audit log has the record.
            self._stats.count("interact.halted")
            return encode_error(
                request_id,
                ErrorCode.INTERNAL,
                f"the interaction halted on an invariant breach; nothing was applied ({halt})",
                {
                    "cause": "invariant_halt",
                    "phase": halt.phase,
                    "invariant": halt.reason,
                    "audit_record_id": halt.audit_record_id,
                },
            )
        except Exception as exc:
            if self._abandoned:  # the store closed under it at shutdown: no bug, and no one to tell
                self._stats.count("interact.abandoned_at_shutdown")
                _log.info("%s ended after shutdown (%s: %s); not answered", what, type(exc).__name__, exc)
                return None
            # a bug: keep serving, tell the client, log with a correlation id
            self._stats.count("internal_errors")
            return internal_error(request_id, what)

    # --- scenes ----------------------------------------------------------------------------

    def _execute_scene(self, job: SceneJob) -> bytes | None:
        """The reply frame of a `scene.next` or `scene.say`; None when a streaming client left."""
        assert self._scenes is not None, "scene jobs need the sidecar's scene runner"
        scenes = self._scenes
        started = time.perf_counter_ns()
        self._stats.observe("queue_wait", (started - job.received_ns) // 1000)
        request = job.request
        if isinstance(request, SceneSayRequest):
            said = self._guarded(job.request_id, "scene.say", lambda: scenes.say(job.scene, request))
            return encode_reply(job.request_id, "scene.say", said) if isinstance(said, BaseModel) else said
        first = [job.received_ns]

        def deadline() -> int:
            # the first line's time counts from arrival (its wait in the queue too); each later
            # line gets the same time from its own start
            start = first.pop() if first else time.perf_counter_ns()
            return start + job.timeout_ns

        def stream(line: int, speaker: str) -> StreamSession | None:
            return self._scene_stream(job, line, speaker) if request.stream else None

        reply = self._guarded(
            job.request_id,
            f"scene.next for {request.scene_id}",
            lambda: scenes.run(
                job.scene, to_end=request.to_end, deadline_ns=deadline, stream=stream, prefetch=self._prefetch, cancel=job.cancel
            ),
        )
        if not isinstance(reply, BaseModel):
            return reply
        for line in reply.lines:
            self._stats.count(f"scene.{line.result.receipt.outcome.value}")
        self._stats.observe("scene.next", (time.perf_counter_ns() - job.received_ns) // 1000)
        return encode_reply(job.request_id, "scene.next", reply)

    def _scene_stream(self, job: SceneJob, line: int, speaker: str) -> StreamSession:
        def emit(chunk: ReleasedChunk) -> None:
            body = SceneChunk(line=line, speaker=speaker, seq=chunk.seq, text=chunk.text, attempt=chunk.attempt)
            self._deliver(job.client, encode_chunk(job.request_id, "scene.next", body))
            self._stats.count("scene.chunks")

        return StreamSession(emit=emit, wanted=lambda: self._is_connected(job.client))


def _cancelled(request_id: int | str, by: str, phase: str, audit_record_id: str | None = None) -> bytes:
    """The `cancelled` error a cancelled request is answered with."""
    details: dict[str, str] = {"by": by, "phase": phase}
    if audit_record_id is not None:
        details["audit_record_id"] = audit_record_id
    where = "while queued" if phase == "queued" else f"before {phase}"
    return encode_error(request_id, ErrorCode.CANCELLED, f"cancelled ({by}) {where}; nothing of it was applied", details)
