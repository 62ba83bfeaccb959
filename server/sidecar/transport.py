"""The socket loop: one ROUTER socket, one thread, never blocked by inference.

Requests are decoded and validated here. `interact` goes to the scheduler's bounded queue
(different NPCs run at once, each NPC's interactions in arrival order); every other message is a quick store operation answered at once. Finished interactions
come back through an inproc socket, so only this thread ever touches the ROUTER socket (ZeroMQ
sockets are not thread-safe).

Disconnects: libzmq tells a socket monitor which connection (file descriptor) was accepted and
which closed, and each received frame carries the descriptor it came from (`SRCFD`); together
they tell which client left (see `_Clients` for descriptors the OS reuses), so its queued
interactions are dropped before inference.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import parse_monitor_message

from loreguard.memory import MemoryStore, StorageUnavailableError
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.scene import SceneIdRequest, SceneNextRequest, SceneSayRequest
from loreguard.schemas.wire import (
    DEFAULT_MAX_MESSAGE_BYTES,
    CancelReply,
    CancelRequest,
    ErrorCode,
    InteractRequest,
    Limits,
    NpcStatusRequest,
)
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.retention import AuditRetention
from loreguard.server.inference.base import InferenceBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.scene import SceneBook, SceneProblem, SceneRunner
from loreguard.server.sidecar.codec import (
    ProtocolError,
    decode_request,
    encode_error,
    encode_reply,
    internal_error,
    storage_error,
)
from loreguard.server.sidecar.dispatch import Dispatcher
from loreguard.server.sidecar.scheduler import InteractionScheduler, InteractJob, SceneJob
from loreguard.server.sidecar.stats import SidecarStats
from loreguard.server.sidecar.warmup import Warmer

_POLL_MS = 100
_log = logging.getLogger("loreguard.sidecar")


class CannotListen(RuntimeError):
    """The sidecar's address could not be bound: most often another sidecar holds the port, or
    one is still shutting down (a launcher may try again in a moment)."""

    def __init__(self, address: str, cause: zmq.ZMQError) -> None:
        why = "the address is already in use" if cause.errno == zmq.EADDRINUSE else str(cause)
        super().__init__(f"cannot listen on {address}: {why}")


@dataclass(frozen=True)
class SidecarConfig:
    host: str = "127.0.0.1"
    #: 0 picks a free port (tests, the demo).
    port: int = 7878
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    queue_size: int = 64
    #: Deadline of an interaction, from arrival to commit.
    request_timeout_ms: int = 60_000
    #: How long shutdown waits for the interaction in progress.
    shutdown_grace_s: float = 30.0
    #: Audit records kept in RAM per NPC for `audit.tail`.
    audit_ring_size: int = 50
    #: How many records the log on disk keeps per NPC (None: all of them).
    audit_retention: AuditRetention | None = None
    #: Interactions run at once (different NPCs); None: as many as the backend serves together.
    workers: int | None = None
    #: Echoed in `hello` (see HelloReply.launch_token).
    launch_token: str | None = None
    #: While a scene's line is spoken, prefill the next speaker's prompt beside it (`Warmer`).
    scene_prefetch: bool = True


class _Clients:
    """Which client identities are still connected, from SRCFD and socket-monitor events.

    libzmq names a connection only by its file descriptor, which the OS reuses, but it reports
    ACCEPTED and DISCONNECTED per descriptor in the order they happen, and every frame a
    connection sends comes after its ACCEPTED. So a client's connection is (descriptor, how many
    connections that descriptor had when the client was first seen), and a DISCONNECTED ends
    exactly the connections on its descriptor up to the latest one: a new client that got a
    departed client's descriptor is never taken for it, in whatever order the events and frames
    are read. Only the socket thread calls these.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # `connected` is asked from the scheduler's threads
        #: descriptor -> connections accepted on it so far
        self._generation: dict[int, int] = {}
        #: descriptor -> the generation of its latest closed connection
        self._closed: dict[int, int] = {}
        self._live: dict[bytes, tuple[int, int]] = {}
        self._gone: dict[bytes, tuple[int, int]] = {}

    def knows(self, client: bytes, fd: int) -> bool:
        """True when the client was already placed on this descriptor (no monitor read needed)."""
        with self._lock:
            return self._live.get(client, (None,))[0] == fd or self._gone.get(client, (None,))[0] == fd

    def accepted(self, fd: int) -> None:
        with self._lock:
            self._generation[fd] = self._generation.get(fd, 0) + 1

    def disconnected(self, fd: int) -> None:
        with self._lock:
            latest = self._closed[fd] = self._generation.get(fd, 0)
            for client, (client_fd, generation) in list(self._live.items()):
                if client_fd == fd and generation <= latest:
                    self._gone[client] = self._live.pop(client)

    def seen(self, client: bytes, fd: int) -> None:
        """A frame from `client` arrived on `fd`; call after reading the monitor's events."""
        with self._lock:
            connection = (fd, self._generation.get(fd, 0))
            if self._live.get(client) == connection or self._gone.get(client) == connection:
                return  # the same connection as before, live or already closed
            self._gone.pop(client, None)  # a client with a fixed identity on a new connection
            if self._closed.get(fd) == connection[1]:
                self._gone[client] = connection  # its frames were read after it closed
            else:
                self._live[client] = connection

    def connected(self, client: bytes) -> bool:
        with self._lock:
            return client not in self._gone


class Sidecar:
    def __init__(
        self,
        store: MemoryStore,
        backend: InferenceBackend,
        config: SidecarConfig | None = None,
        *,
        pipeline_config: PipelineConfig | None = None,
        judge_backend: InferenceBackend | None = None,
    ) -> None:
        """`pipeline_config` and `judge_backend` configure governance (e.g. the semantic judge
        and the model it asks; without one, its keyword check)."""
        self.config = config or SidecarConfig()
        self.store = store
        self.backend = backend
        self.stats = SidecarStats()
        fingerprint = backend.fingerprint()
        #: Every interaction is recorded; a record that cannot be written fails the interaction.
        self.recorder = AuditRecorder(
            store, fingerprint=fingerprint, ring_size=self.config.audit_ring_size, retention=self.config.audit_retention
        )
        self.pipeline = GovernancePipeline(store, backend, pipeline_config, judge_backend=judge_backend, recorder=self.recorder)
        limits = Limits(
            max_message_bytes=self.config.max_message_bytes,
            queue_size=self.config.queue_size,
            request_timeout_ms=self.config.request_timeout_ms,
        )
        self.warmer = Warmer(self.pipeline, self.stats)
        self.scenes = SceneBook()
        self.dispatcher = Dispatcher(
            store,
            fingerprint=fingerprint,
            limits=limits,
            stats=self.stats,
            recorder=self.recorder,
            launch_token=self.config.launch_token,
            warmer=self.warmer,
            scenes=self.scenes,
        )
        self._context = zmq.Context()
        self._router = self._context.socket(zmq.ROUTER)
        self.address = self._bind()
        self._monitor = self._router.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._replies_address = f"inproc://loreguard-replies-{uuid.uuid4().hex}"
        self._replies = self._context.socket(zmq.PULL)
        self._replies.bind(self._replies_address)
        self._clients = _Clients()
        self._reply_sockets = threading.local()
        self._sender_sockets: list[zmq.Socket] = []
        #: Held while a worker sends and while `_close` closes the senders: a reply never goes to
        #: a socket closed under it. Sends never block (no high-water mark), so it is brief.
        self._sender_lock = threading.Lock()
        self._senders_closed = False
        self.worker = InteractionScheduler(
            self.pipeline,
            workers=self.config.workers or backend.max_concurrency,
            queue_size=self.config.queue_size,
            deliver=self._deliver,
            is_connected=self._clients.connected,
            stats=self.stats,
            scenes=SceneRunner(self.pipeline, self.scenes),
            prefetch=self._prefetch if self.config.scene_prefetch else None,
        )
        self._stop = threading.Event()
        self._stopped = threading.Event()

    def _bind(self) -> str:
        """Bind the ROUTER socket (a random free port for port 0); its address, or `CannotListen`."""
        self._router.setsockopt(zmq.MAXMSGSIZE, self.config.max_message_bytes)
        self._router.setsockopt(zmq.LINGER, 2000)
        if self.config.port == 0:
            return f"tcp://{self.config.host}:{self._router.bind_to_random_port(f'tcp://{self.config.host}')}"
        address = f"tcp://{self.config.host}:{self.config.port}"
        try:
            self._router.bind(address)
        except zmq.ZMQError as exc:
            self._router.close(0)
            self._context.term()
            raise CannotListen(address, exc) from None
        return address

    def _prefetch(self, context: InteractionContext) -> None:
        self.warmer.request(context.npc_id, context)

    # --- replies from other threads ------------------------------------------------------

    def _deliver(self, client: bytes, frame: bytes) -> None:
        """Hand a reply to the socket loop; after shutdown (an interaction that outlived
        `shutdown_grace_s`) it is dropped with a log line: there is no socket left to send on."""
        with self._sender_lock:
            if self._senders_closed:
                self.stats.count("replies.dropped_after_shutdown")
                _log.info("a reply was dropped: the sidecar had already shut down when its interaction ended")
                return
            sock = getattr(self._reply_sockets, "socket", None)
            if sock is None:
                sock = self._context.socket(zmq.PUSH)
                sock.setsockopt(zmq.SNDHWM, 0)
                sock.connect(self._replies_address)
                self._reply_sockets.socket = sock
                self._sender_sockets.append(sock)
            sock.send_multipart([client, frame])

    # --- the loop ------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the loop to shut down (safe from signal handlers and other threads)."""
        self._stop.set()

    def serve_forever(self) -> None:
        """Run until `request_stop`; then answer what is in flight and close everything."""
        self.worker.start()
        self.warmer.start()
        poller = zmq.Poller()
        for sock in (self._router, self._replies, self._monitor):
            poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                self._poll_once(poller)
            self._drain(poller)
        finally:
            self._close()

    def _poll_once(self, poller: zmq.Poller, *, accepting: bool = True) -> None:
        events = dict(poller.poll(_POLL_MS))
        if self._monitor in events:
            self._read_monitor()
        if self._replies in events:
            while self._replies.poll(0):
                self._router.send_multipart(self._replies.recv_multipart())
        if self._router in events:
            for _ in range(256):  # bounded batch, so replies are never starved
                if not self._router.poll(0):
                    break
                self._receive(accepting)

    def _read_monitor(self) -> None:
        while self._monitor.poll(0):
            event = parse_monitor_message(self._monitor.recv_multipart())
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._clients.accepted(int(event["value"]))
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self._clients.disconnected(int(event["value"]))
                self.stats.count("clients.disconnected")

    def _receive(self, accepting: bool) -> None:
        frames = self._router.recv_multipart(copy=False)
        client = frames[0].bytes
        fd = frames[1].get(zmq.SRCFD) if len(frames) > 1 else -1
        if not self._clients.knows(client, fd):
            self._read_monitor()  # the ACCEPTED of this client's connection came before its frame
        self._clients.seen(client, fd)
        received = time.perf_counter_ns()
        self.stats.count("requests")
        if len(frames) != 2:
            self._reply(client, encode_error(None, ErrorCode.BAD_REQUEST, "a request is one message of exactly one frame"))
            return
        request_id = None
        try:
            request = decode_request(frames[1].bytes, max_bytes=self.config.max_message_bytes)
            request_id = request.id
            if not accepting:
                raise ProtocolError(ErrorCode.OVERLOADED, "the sidecar is shutting down", request_id=request.id)
            if isinstance(request.body, InteractRequest):  # the `interact` body (the codec's message table)
                self._submit(client, request.id, request.body, received)
                return
            if isinstance(request.body, SceneNextRequest | SceneSayRequest):  # run in the scene's NPCs' order
                self._submit_scene(client, request.id, request.body, received)
                return
            if isinstance(request.body, CancelRequest):  # names a request of this client
                reply = encode_reply(request.id, request.type, self._cancel(client, request.body))
                self._reply(client, reply)
                return
            if isinstance(request.body, NpcStatusRequest) and request.body.wait:  # answered when it is warm
                self._status_when_ready(client, request.id, request.body)
                return
            if isinstance(request.body, SceneIdRequest) and request.type == "scene.end":
                self.worker.end_scene(request.body.scene_id)  # its line running is not remembered
            reply = encode_reply(request.id, request.type, self.dispatcher.handle(request.type, request.body))
            self.stats.observe(request.type, (time.perf_counter_ns() - received) // 1000)
        except ProtocolError as exc:
            self.stats.count(f"errors.{exc.code.value}")
            reply = encode_error(exc.request_id if exc.request_id is not None else request_id, exc.code, exc.message, exc.details)
        except StorageUnavailableError as exc:  # registration, state, a save: refused whole, nothing changed
            self.stats.count("errors.storage_unavailable")
            reply = storage_error(request_id, exc)
        except Exception:  # a bug in a handler: answer, log, keep serving
            self.stats.count("internal_errors")
            reply = internal_error(request_id, "the socket loop")
        self._reply(client, reply)

    def _submit(self, client: bytes, request_id: int | str, body: InteractRequest, received: int) -> None:
        self.dispatcher.require_npc(body.npc_id)
        job = InteractJob(
            client=client,
            request_id=request_id,
            context=body.context(),
            stream=body.stream,
            received_ns=received,
            deadline_ns=received + self.config.request_timeout_ms * 1_000_000,
        )
        self._queue(job, "interact.queued")

    def _submit_scene(
        self, client: bytes, request_id: int | str, body: SceneNextRequest | SceneSayRequest, received: int
    ) -> None:
        try:
            scene = self.scenes.get(body.scene_id)
        except SceneProblem as problem:
            raise ProtocolError(
                ErrorCode(problem.code), problem.message, request_id=request_id, details=problem.details()
            ) from None
        job = SceneJob(
            client=client,
            request_id=request_id,
            request=body,
            scene=scene,
            npcs=scene.npc_ids,
            received_ns=received,
            timeout_ns=self.config.request_timeout_ms * 1_000_000,
        )
        self._queue(job, "scene.queued")

    def _status_when_ready(self, client: bytes, request_id: int | str, body: NpcStatusRequest) -> None:
        """`npc.status` with `wait`: answered (from the warm-up thread) once the NPC is warm."""
        self.dispatcher.require_npc(body.npc_id)

        def reply() -> None:
            self._deliver(client, encode_reply(request_id, "npc.status", self.dispatcher.on_npc_status(body)))

        self.stats.count("npc.status.waits")
        self.warmer.when_ready(body.npc_id, reply)

    def _cancel(self, client: bytes, body: CancelRequest) -> CancelReply:
        state = self.worker.cancel(client, body.request_id)
        if state is None:
            raise ProtocolError(
                ErrorCode.NOT_FOUND, f"no request {body.request_id!r} of this client is queued, running or recently finished",
                details={"request_id": body.request_id},
            )  # fmt: skip
        self.stats.count(f"cancel.{state}")
        return CancelReply(request_id=body.request_id, state="finished" if state == "finished" else "cancelled", was=state)

    def _queue(self, job: InteractJob | SceneJob, counter: str) -> None:
        """Hand a job to the scheduler, or answer `overloaded` when its queue is full."""
        if not self.worker.submit(job):
            self.stats.count("errors.overloaded")
            raise ProtocolError(
                ErrorCode.OVERLOADED, "the interaction queue is full; retry later", request_id=job.request_id,
                details={"queue_size": self.config.queue_size},
            )  # fmt: skip
        self.stats.count(counter)

    def _reply(self, client: bytes, frame: bytes) -> None:
        self._router.send_multipart([client, frame])

    def _drain(self, poller: zmq.Poller) -> None:
        """Refuse queued work with a typed error, finish the running interactions, flush replies."""
        done = threading.Event()

        def stop_worker() -> None:
            self.warmer.shutdown()
            self.worker.shutdown(self.config.shutdown_grace_s)
            done.set()

        threading.Thread(target=stop_worker, name="loreguard-shutdown", daemon=True).start()
        while not done.is_set():
            self._poll_once(poller, accepting=False)
        self._poll_once(poller, accepting=False)

    def _close(self) -> None:
        with self._sender_lock:
            self._senders_closed = True
            for sock in self._sender_sockets:
                sock.close(linger=0)
        self._router.disable_monitor()
        self._monitor.close(linger=0)
        self._replies.close(linger=0)
        self._router.close()  # lingers up to 2 s so the last replies leave
        self._context.term()
        self.store.close()
        self._stopped.set()

    # --- running in a thread (tests, the demo) -------------------------------------------

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="loreguard-sidecar", daemon=True)
        thread.start()
        return thread

    def stop(self, timeout_s: float = 60.0) -> None:
        self.request_stop()
        self._stopped.wait(timeout_s)
