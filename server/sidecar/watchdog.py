"""The sidecar ends itself when its model stops answering, so the game's launcher restarts it.

A GPU driver that hangs inside a kernel leaves llama.cpp's decode call blocked forever: the
engine thread never returns, every interaction after it waits, and a game sees an NPC that never
speaks again. No thread can interrupt a native call, but a process can exit: `StallWatch` checks
how long the running call has taken (`InferenceBackend.stalled_s`) and, past the limit, says so
in one line and ends the process. The launcher (the Godot addon's supervisor) sees the exit and
starts a new sidecar; the interactions in flight fail with a typed error on the client's side.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class StallWatch:
    """Calls `on_stall(seconds)` once when `stalled_s()` reaches `limit_s`; checks every `poll_s`."""

    def __init__(
        self, stalled_s: Callable[[], float], limit_s: float, on_stall: Callable[[float], None], *, poll_s: float = 1.0
    ) -> None:
        if limit_s <= 0:
            raise ValueError("a stall limit must be positive (or no StallWatch at all)")
        self._stalled_s = stalled_s
        self._limit_s = limit_s
        self._on_stall = on_stall
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loreguard-stall-watch", daemon=True)

    def start(self) -> StallWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            stalled = self._stalled_s()
            if stalled >= self._limit_s:
                self._on_stall(stalled)
                return
