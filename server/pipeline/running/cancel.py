"""Cancelling an interaction: a switch the sidecar sets from its socket thread, read by the
pipeline at each step of the interaction's worker.

The pipeline asks at three places: before each attempt's generation, at every decoded token
(the engine stops and frees the sequence at its next step), and once before it commits. The
last is a race with the cancel, settled under one lock: either the interaction commits and the
cancel is told `finished`, or the cancel wins and nothing is applied. A replay takes the
decision from the record instead (`RecordedCancel`): it stops where the live run stopped.
"""

from __future__ import annotations

import threading
from typing import Protocol

from loreguard.schemas.receipt import CancelledBy, CancelRecord


class Cancellation(Protocol):
    """What the pipeline asks of a cancel switch (`CancelSwitch` live, `RecordedCancel` in replay)."""

    @property
    def by(self) -> CancelledBy | None:
        """Who cancelled, once cancelled; None while the interaction goes on."""

    def stops_before(self, phase: str) -> bool:
        """Whether the interaction stops before `phase` (`inference.N`)."""

    def stops_generation(self) -> bool:
        """Whether a generation running now is to be cut at its next step."""

    def may_commit(self) -> bool:
        """Claim the commit: False when cancelled (the interaction must not commit); once True,
        a later cancel comes too late."""


class CancelSwitch:
    """One interaction's live switch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: CancelledBy | None = None
        self._committing = False

    def cancel(self, by: CancelledBy) -> bool:
        """Stop the interaction before it commits; False when it already commits (too late: its
        reply stands). The first cancel names who cancelled."""
        with self._lock:
            if self._committing:
                return False
            if self._by is None:
                self._by = by
            return True

    @property
    def by(self) -> CancelledBy | None:
        return self._by

    def stops_before(self, phase: str) -> bool:
        return self._by is not None

    def stops_generation(self) -> bool:
        return self._by is not None

    def may_commit(self) -> bool:
        with self._lock:
            if self._by is not None:
                return False
            self._committing = True
            return True


class RecordedCancel:
    """A replay's switch: the interaction stops where the recorded one stopped. A generation cut
    mid-way left nothing in the record, so the replay stops before that attempt begins."""

    def __init__(self, record: CancelRecord) -> None:
        self._record = record
        self._stopped = False

    @property
    def by(self) -> CancelledBy | None:
        return self._record.by if self._stopped else None

    def stops_before(self, phase: str) -> bool:
        self._stopped = self._stopped or phase == self._record.phase
        return self._stopped

    def stops_generation(self) -> bool:
        return False

    def may_commit(self) -> bool:
        self._stopped = self._stopped or self._record.phase == "commit"
        return not self._stopped
