"""The inference worker: interactions run here, one at a time, in arrival order.

One worker thread serves every NPC from one bounded FIFO queue. That gives the ordering the
protocol promises (interactions for the same NPC apply strictly in the order they arrived) and
matches the model: one llama.cpp context evaluates one prompt at a time. The socket loop never
waits for it; finished replies come back through `deliver`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loreguard.memory import AuditWriteError
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.wire import ErrorCode
from loreguard.server.pipeline import DeadlineExceeded, GovernancePipeline, UnknownNpcError
from loreguard.server.sidecar.codec import encode_error, encode_reply, internal_error
from loreguard.server.sidecar.stats import SidecarStats


@dataclass(frozen=True)
class InteractJob:
    client: bytes
    request_id: int | str
    context: InteractionContext
    received_ns: int
    deadline_ns: int


Deliver = Callable[[bytes, bytes], None]


class InteractionWorker:
    def __init__(
        self,
        pipeline: GovernancePipeline,
        *,
        queue_size: int,
        deliver: Deliver,
        is_connected: Callable[[bytes], bool],
        stats: SidecarStats,
    ) -> None:
        self._pipeline = pipeline
        self._queue: queue.Queue[InteractJob | None] = queue.Queue(maxsize=queue_size)
        self._deliver = deliver
        self._is_connected = is_connected
        self._stats = stats
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loreguard-inference", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, job: InteractJob) -> bool:
        """Queue a job; False when the queue is full (the caller answers `overloaded`)."""
        if self._closed.is_set():
            return False
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            return False
        return True

    def shutdown(self, timeout_s: float) -> None:
        """Refuse queued jobs with a typed error, let the running one finish, stop the thread."""
        self._closed.set()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._stats.count("interact.refused_shutdown")
                self._deliver(job.client, encode_error(job.request_id, ErrorCode.OVERLOADED, "the sidecar is shutting down"))
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if not self._is_connected(job.client):
                self._stats.count("interact.dropped_disconnected")
                continue
            self._deliver(job.client, self._execute(job))

    def _execute(self, job: InteractJob) -> bytes:
        started = time.perf_counter_ns()
        self._stats.observe("queue_wait", (started - job.received_ns) // 1000)
        if started > job.deadline_ns:
            self._stats.count("interact.timeout")
            return encode_error(job.request_id, ErrorCode.TIMEOUT, "the deadline passed while the request was queued")
        try:
            result = self._pipeline.interact(job.context, deadline_ns=job.deadline_ns)
        except UnknownNpcError as exc:
            return encode_error(job.request_id, ErrorCode.NOT_FOUND, str(exc), {"npc_id": job.context.npc_id})
        except DeadlineExceeded as exc:
            self._stats.count("interact.timeout")
            return encode_error(job.request_id, ErrorCode.TIMEOUT, str(exc))
        except AuditWriteError as exc:
            # Not a bug but the same promise as `internal`: nothing changed. `details.cause`
            # tells the game it is the disk, not the request.
            self._stats.count("interact.audit_failed")
            return encode_error(job.request_id, ErrorCode.INTERNAL, str(exc), {"cause": "audit_write_failed"})
        except Exception:  # a bug: keep serving, tell the client, log with a correlation id
            self._stats.count("internal_errors")
            return internal_error(job.request_id, f"interact for {job.context.npc_id}")
        self._stats.observe("interact", (time.perf_counter_ns() - job.received_ns) // 1000)
        self._stats.count(f"interact.{result.receipt.outcome.value}")
        return encode_reply(job.request_id, "interact", result)
