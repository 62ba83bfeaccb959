"""What the pipeline needs from an audit recorder: the one seam between governance and audit.

The pipeline plans its batch, builds the reply, asks the sink for the record of it, and commits
batch and record in one transaction; after the commit it tells the sink. Any object with these
two methods will do (`loreguard.server.audit.AuditRecorder` is the one the sidecar uses), so the
pipeline imports nothing from the audit package, as httpx's client knows only `BaseTransport`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from loreguard.memory.audit_log import AuditEntry
from loreguard.memory.store import StoreView
from loreguard.schemas.audit import AuditRecord, AuditTimings
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.receipt import InteractionResult


class AuditSink(Protocol):
    def entry(
        self,
        seq: int,
        *,
        context: InteractionContext,
        view: StoreView,
        config: tuple[str, str],
        result: InteractionResult,
        prompts: Iterable[str],
        timings: AuditTimings,
    ) -> tuple[AuditRecord, AuditEntry]:
        """The record of one finished interaction at log position `seq`, and the log entry that
        stores it. `config` is the (hash, canonical JSON) of the settings it ran under."""
        ...

    def committed(self, record: AuditRecord, entry: AuditEntry) -> None:
        """The record's transaction committed."""
        ...
