"""`npc.warm`: NPCs' prompts evaluated into the model's cache before their first line.

The socket thread only queues the NPC (the reply goes out at once); one thread here builds the
NPC's prompt up to its new message and hands it to the backend, which evaluates it in idle time
and gives way to every interaction (`InferenceBackend.warm`). A warm-up reads memory and writes
nothing: no memory hash, audit record or interaction count changes. `stats` reports each
outcome (`warm.warmed`, `warm.already`, `warm.no_room`, `warm.failed`), the prompt tokens
evaluated and those restored from disk (`warm.tokens_evaluated`, `warm.tokens_restored`), and
`warm.pending`, the warm-ups queued or running, which a game (or a benchmark) waits on to reach 0.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from loreguard.schemas.interaction import InteractionContext
from loreguard.server.inference.base import BackendError
from loreguard.server.pipeline import GovernancePipeline, PipelineError
from loreguard.server.sidecar.stats import SidecarStats

_log = logging.getLogger("loreguard.sidecar")


class Warmer:
    def __init__(self, pipeline: GovernancePipeline, stats: SidecarStats) -> None:
        self._pipeline = pipeline
        self._stats = stats
        self._cond = threading.Condition()
        #: NPC ids in the order asked, each at most once, with the context of the line expected
        #: (None: a player's line outside a scene).
        self._queue: deque[str] = deque()
        self._contexts: dict[str, InteractionContext | None] = {}
        self._running: str | None = None
        #: Told once the NPC's warm-up is done (`npc.status` with `wait`), by NPC id.
        self._waiters: dict[str, list[Callable[[], None]]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="loreguard-warm", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, npc_id: str, context: InteractionContext | None = None) -> None:
        """Queue a warm-up of the NPC (once, however often it is asked before it runs; the
        latest `context` asked for is the one warmed)."""
        self._stats.count("warm.requested")
        with self._cond:
            if self._closed:
                return
            self._contexts[npc_id] = context
            if npc_id in self._queue:
                return
            self._queue.append(npc_id)
            self._cond.notify()

    @property
    def pending(self) -> int:
        """Warm-ups queued or running."""
        with self._cond:
            return len(self._queue) + (self._running is not None)

    def waiting(self, npc_id: str) -> bool:
        """Whether a warm-up of the NPC is queued or running (`npc.status`: not ready yet)."""
        with self._cond:
            return npc_id in self._queue or self._running == npc_id

    def when_ready(self, npc_id: str, call: Callable[[], None]) -> None:
        """Call `call` once no warm-up of the NPC is queued or running: at once if none is, else
        from this thread when it is done (or at shutdown)."""
        with self._cond:
            if not self._closed and (npc_id in self._queue or self._running == npc_id):
                self._waiters.setdefault(npc_id, []).append(call)
                return
        call()

    def shutdown(self) -> None:
        """Drop the queued warm-ups; the one running ends when the engine closes. Whoever waits
        for a warm-up is answered now."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._contexts.clear()
            waiting = [call for calls in self._waiters.values() for call in calls]
            self._waiters.clear()
            self._cond.notify_all()
        for call in waiting:
            call()

    def _take(self) -> tuple[str, InteractionContext | None] | None:
        with self._cond:
            while not self._closed and not self._queue:
                self._cond.wait()
            if self._closed:
                return None
            self._running = self._queue.popleft()
            return self._running, self._contexts.pop(self._running, None)

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            try:
                self._warm(*taken)
            finally:
                with self._cond:
                    self._running = None
                    done = [] if taken[0] in self._queue else self._waiters.pop(taken[0], [])
                for call in done:
                    call()

    def _warm(self, npc_id: str, context: InteractionContext | None) -> None:
        try:
            prompt = self._pipeline.warm_prompt(npc_id, context)
            # A scene's next speaker (a context given) is prefilled beside the line being spoken.
            result = self._pipeline.backend.warm(npc_id, prompt, alongside=context is not None)
        except (PipelineError, BackendError) as exc:
            # An NPC gone since it was queued, a prompt over the context, an engine shut down:
            # nothing was changed, and its first turn simply evaluates everything.
            self._stats.count("warm.failed")
            _log.info("warm-up of %s skipped: %s", npc_id, exc)
            return
        except Exception:  # a bug: keep warming the others, and say so
            self._stats.count("warm.failed")
            self._stats.count("internal_errors")
            _log.exception("warm-up of %s failed", npc_id)
            return
        self._stats.count(f"warm.{result.outcome}")
        self._stats.count("warm.tokens_evaluated", result.tokens_evaluated)
        self._stats.count("warm.tokens_restored", result.tokens_restored)
        self._stats.count("warm.yielded", result.yielded)
