"""Committing an ending: plan the batch, build the reply and the audit record from the memory
hash it leads to, then write batch and record in one short transaction; plan again when another
batch committed meanwhile (`GovernancePipeline`'s commit side)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from loreguard.memory.audit_log import AuditEntry
from loreguard.memory.errors import StalePlanError
from loreguard.memory.store import MemoryStore, PlannedBatch, StoreView
from loreguard.schemas.audit import AuditTimings
from loreguard.schemas.interaction import InteractionContext, TriggerReason
from loreguard.schemas.receipt import InteractionResult
from loreguard.server.pipeline.errors import LifecycleHalt
from loreguard.server.pipeline.running.run_state import InteractionRun
from loreguard.server.pipeline.running.sink import AuditSink

_log = logging.getLogger("loreguard.pipeline")
#: Plans a commit may make before giving up: each new plan follows another batch's commit, so
#: reaching this means the store is being written in a tight loop.
_MAX_PLANS = 16


class Committer:
    """Commits endings one at a time: interactions that finish together (a remote server's slots
    all answer at once) would otherwise invalidate each other's plans in turn until one gave up.
    Planning is CPU under the GIL anyway; other writers to the store (the game's world state)
    still make a plan stale, and it is planned again."""

    def __init__(
        self, store: MemoryStore, recorder: AuditSink | None, config: tuple[str, str], count: Callable[[str], None]
    ) -> None:
        self.store = store
        #: With a recorder, every ending writes an audit record in the same transaction as its
        #: memory batch, or fails with `StorageUnavailableError` and changes nothing.
        self.recorder = recorder
        self._config_hash, self._config_json = config
        self._count = count
        #: Held by an ending from plan to commit; a consolidation takes it too.
        self.lock = threading.Lock()

    def consolidation(
        self, view: StoreView, writes: list, prompt: str, build: Callable[[str], InteractionResult]
    ) -> InteractionResult | None:
        """Plan, record and commit a consolidation's batch (the caller holds `lock`). None when the
        NPC's memory changed since it was read (an interaction overlapped it)."""
        scopes = tuple(name for name, _ in view.scope_hashes)
        context = InteractionContext(npc_id=view.profile.id, trigger_reason=TriggerReason.CUSTOM)
        for _ in range(_MAX_PLANS):
            planned = self.store.plan(writes, hash_scopes=scopes)
            if planned.next_seq_before != view.next_seq:
                view = replace(view, next_seq=planned.next_seq_before)  # another NPC wrote: as in `_plan_and_commit`
            if not planned.ok:  # memory's own checks refused a note the gate passed: nothing changes
                self._count("consolidation.refused_by_memory")
                _log.warning("consolidation of %s refused by memory: %s", view.profile.id, planned.plan.refusals)
                return None
            if planned.memory_hash_before != view.memory_hash:
                self._count("consolidation.stale")
                return None
            result = build(planned.memory_hash_after)
            if self.recorder is None:
                if self._committed(planned):
                    return result
                continue
            record, entry = self.recorder.entry(
                planned.audit_seq, context=context, view=view, config=(self._config_hash, self._config_json),
                result=result, prompts=[prompt], timings=AuditTimings(),
            )  # fmt: skip
            if self._committed(planned, audit=entry):
                self.recorder.committed(record, entry)
                return result.model_copy(update={"audit_record_id": record.record_id})
        raise LifecycleHalt("consolidation", f"memory changed under this consolidation's commit {_MAX_PLANS} times in a row")

    def ending(
        self,
        run: InteractionRun,
        phase: str,
        writes: list,
        build: Callable[[str], InteractionResult],
        *,
        complete: bool = True,
        fallback_line: str | None = None,
    ) -> InteractionResult:
        """Plan the ending's batch, build the reply from the memory hash it leads to and, with a
        recorder, the audit record; then commit batch and record in one short transaction."""
        complete_interaction = run.ctx.npc_id if complete else None
        recorder = self.recorder
        if recorder is None and not writes and complete_interaction is None:
            # A clarify without a record has nothing to write.
            run.timer.lap(phase)
            return build(self.store.memory_hash(run.scopes))
        with self.lock:
            return self._plan_and_commit(run, phase, writes, build, complete_interaction, fallback_line)

    def _plan_and_commit(
        self,
        run: InteractionRun,
        phase: str,
        writes: list,
        build: Callable[[str], InteractionResult],
        complete_interaction: str | None,
        fallback_line: str | None,
    ) -> InteractionResult:
        recorder = self.recorder
        for plans in range(_MAX_PLANS):
            planned = self.store.plan(
                writes, complete_interaction=complete_interaction, hash_scopes=run.scopes, fallback_line=fallback_line
            )
            if not planned.ok:
                raise LifecycleHalt(phase, f"memory refused approved writes: {planned.plan.refusals}")
            if not writes and planned.memory_hash_after != planned.memory_hash_before:
                raise LifecycleHalt(phase, "memory changed without a validated output")
            if planned.next_seq_before != run.view.next_seq:
                # Another NPC's batch committed since this interaction read memory: its scopes
                # are as read, but its new entries take later sequence numbers. The reply and the
                # record describe that state, so a replay assigns the same ids.
                run.view = replace(run.view, next_seq=planned.next_seq_before)
                run.hash_before = run.view.memory_hash
            if plans == 0:
                run.timer.lap(phase)
            result = build(planned.memory_hash_after)
            if recorder is None:
                if self._committed(planned):
                    return result
                continue
            record, entry = recorder.entry(
                planned.audit_seq,
                context=run.received,
                view=run.view,
                config=(self._config_hash, self._config_json),
                result=result,
                prompts=run.prompts,
                timings=AuditTimings(ttft_ms=run.ttft_ms, total_ms=run.timer.elapsed_ms()),
            )
            if self._committed(planned, audit=entry):
                recorder.committed(record, entry)
                return result.model_copy(update={"audit_record_id": record.record_id})
        raise LifecycleHalt(phase, f"memory changed under this interaction's commit {_MAX_PLANS} times in a row")

    def _committed(self, planned: PlannedBatch, *, audit: AuditEntry | None = None) -> bool:
        """Commit a plan; False when another batch (another NPC's interaction, the game's world
        state) committed after it was planned, so the caller plans again against the new state."""
        try:
            self.store.commit(planned, audit=audit)
        except StalePlanError:
            self._count("commit_replanned")
            return False
        return True
