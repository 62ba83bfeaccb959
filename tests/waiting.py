"""Waiting on events, never on time: poll a condition until it holds or a generous deadline passes.

CI runs on a loaded 2-core machine, where "it surely happened after 0.5 s" is a future flake. A
test waits for the thing it needs (a counter, a line of output, a file) and fails with a message
that says what never happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Long enough for a machine under any load we have seen; a passing test never waits it out.
DEADLINE_S = 60.0


def wait_for(condition: Callable[[], object], what: str, *, timeout_s: float = DEADLINE_S) -> None:
    """Return once `condition()` is truthy; raise AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()  # never set: its wait is an interruptible pause between checks
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:.0f} s for {what}")
        pause.wait(0.01)


def counter(client: object, name: str) -> int:
    """A sidecar counter through the `stats` message (0 until first counted)."""
    return client.stats().counters.get(name, 0)  # type: ignore[attr-defined]
