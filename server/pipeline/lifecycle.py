"""The orchestrator: one interaction as an explicit lifecycle.

    intake -> expectancy -> contract -> sufficiency -> snapshot
      -> [prompt -> inference -> gate] x attempts (retry with escalation and repair)
      -> mutation (validated)  |  fallback (critical, exhausted, budget)  |  clarify

Each phase yields exactly one outcome, recorded in the receipt with its duration. An
invariant breach raises `LifecycleHalt`; it is never passed over silently. The clock is
injected and only ever feeds timings, which are metadata outside every hash.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial

from loreguard.memory.errors import UnknownScopeError
from loreguard.memory.hashing import canonical_json, sha256_hex
from loreguard.memory.store import MemoryStore
from loreguard.schemas.interaction import InteractionContext, SceneLine, TriggerReason
from loreguard.schemas.memory import UpsertBelief
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import CancelRecord, GateFailure, InteractionOutcome, InteractionResult
from loreguard.server.inference.base import BackendError, InferenceBackend
from loreguard.server.pipeline import summaries
from loreguard.server.pipeline.contract import Verdict
from loreguard.server.pipeline.errors import DeadlineExceeded, InteractionCancelled, LifecycleHalt, UnknownNpcError
from loreguard.server.pipeline.fallback import choose_fallback, deal_fallback
from loreguard.server.pipeline.gate import GateResult
from loreguard.server.pipeline.mutation import heard_writes, plan_writes
from loreguard.server.pipeline.prompt import assemble_prompt
from loreguard.server.pipeline.retry import escalate, repair_message
from loreguard.server.pipeline.running.attempt import Accept, GiveUp, StreamCarry, keeps_decline, next_step, run_attempt
from loreguard.server.pipeline.running.cancel import Cancellation
from loreguard.server.pipeline.running.commit import Committer
from loreguard.server.pipeline.running.config import PipelineConfig
from loreguard.server.pipeline.running.judge import SemanticJudge
from loreguard.server.pipeline.running.preparation import prepare
from loreguard.server.pipeline.running.run_state import ClockTimeDecisions, InteractionRun, PhaseTimer, TimeDecisions
from loreguard.server.pipeline.running.sink import AuditSink
from loreguard.server.pipeline.running.streaming import StreamSession
from loreguard.server.pipeline.snapshot import ScoredEpisode
from loreguard.server.pipeline.turn.transcript import listeners

__all__ = ["GovernancePipeline", "PipelineConfig"]

_log = logging.getLogger("loreguard.pipeline")


class GovernancePipeline:
    """Runs interactions against one memory store and one model backend."""

    def __init__(
        self,
        store: MemoryStore,
        backend: InferenceBackend,
        config: PipelineConfig | None = None,
        *,
        judge_backend: InferenceBackend | None = None,
        recorder: AuditSink | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        time_decisions: TimeDecisions | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.config = config or PipelineConfig()
        # What replay needs to run under the same settings; hashed once, stored once.
        self._config_json = canonical_json(
            {"pipeline": self.config.model_dump(mode="json"), "memory_policy": store.policy.model_dump(mode="json")}
        ).decode("utf-8")
        self._config_hash = sha256_hex(self._config_json)
        self.judge = SemanticJudge(judge_backend, timeout_ms=self.config.judge_timeout_ms)
        self.clock = clock
        #: Whether the retry budget or the deadline is spent: read from the clock, or (a
        #: replay) from the record.
        self.time_decisions: TimeDecisions = time_decisions or ClockTimeDecisions()
        self.counters: Counter[str] = Counter()
        self._counters_lock = threading.Lock()
        #: Plans, records and commits each ending, one at a time (`running.commit`).
        self.committer = Committer(store, recorder, (self._config_hash, self._config_json), self._count)
        self._specials: tuple[str, ...] | None = None

    @property
    def recorder(self) -> AuditSink | None:
        """With a recorder, every interaction writes an audit record in the same transaction as
        its memory batch, or fails with `StorageUnavailableError` and changes nothing."""
        return self.committer.recorder

    @recorder.setter
    def recorder(self, recorder: AuditSink | None) -> None:
        self.committer.recorder = recorder

    def _special_tokens(self) -> tuple[str, ...]:
        """The model's special tokens, asked once (a backend lists them from its vocabulary)."""
        if self._specials is None:
            self._specials = self.backend.special_tokens()
        return self._specials

    def _count(self, key: str, n: int = 1) -> None:
        # Interactions of different NPCs run on different threads (the sidecar's scheduler).
        with self._counters_lock:
            self.counters[key] += n

    def record_correction(self, rule_id: str, verdict: int) -> None:
        """Designer feedback on a behavioural rule (+1 right, -1 wrong); persisted."""
        self.store.behaviour.record_correction(rule_id, verdict)

    def interact(
        self,
        context: InteractionContext,
        *,
        deadline_ns: int | None = None,
        stream: StreamSession | None = None,
        cancel: Cancellation | None = None,
    ) -> InteractionResult:
        """Run one interaction to exactly one outcome: validated, fallback or clarify.

        Thread-safe for different NPCs: their interactions may run at once (they read and write
        disjoint scopes, and each commit re-plans if another committed first). Interactions of
        one NPC must not overlap; the sidecar's scheduler keeps them in arrival order.

        `deadline_ns` is a time on the pipeline's clock by which the interaction answers, however
        slow the model: a generation still running `PipelineConfig.deadline_margin_ms` before it
        is cut, no attempt starts after that, and the answer is the NPC's fallback line
        (`fallback_reason` `time_budget`) unless a reply was accepted (or, streamed, released)
        by then. Nothing of a cut generation is applied or recorded as an attempt. Only a
        deadline already past before the first attempt raises `DeadlineExceeded`, with memory
        unchanged.

        With `stream`, the reply is released chunk by chunk as it passes the incremental gate
        (`streaming`): the chunks always add up to the result's dialogue (a fallback line is one
        chunk); when the session's client leaves, `InteractionCancelled` is raised with nothing
        applied.

        With `cancel` (`running.cancel`), the interaction stops when it is cancelled: before the
        next attempt, within a token of a generation running (a backend that `stops_when_told`),
        or before it commits; `InteractionCancelled`, nothing applied, and an audit record with
        outcome `cancelled` that says by whom, where and after how long.
        """
        run = self._prepare(context)
        run.deadline_ns = deadline_ns
        if deadline_ns is not None:
            run.cut_ns = deadline_ns - self.config.deadline_margin_ms * 1_000_000
        run.time_budget_ms = self.config.retry.time_budget_ms
        if stream is not None:
            stream.clock_ms = run.timer.elapsed_ms
            run.stream = stream
        run.cancel = cancel
        try:
            if run.sufficiency.verdict is Verdict.CLARIFY:
                return self._clarify(run)
            # What is ready by the cut commits: an accepted reply, or the fallback line.
            accepted, warnings, fallback_reason = self._attempts(run)
            if accepted is not None:
                return self._apply(run, accepted, warnings)
            result = self._fallback(run, fallback_reason)
            if run.stream is not None and result.dialogue:
                run.stream.release(result.dialogue, 0)  # attempt 0: not a model's line
            return result
        except LifecycleHalt as halt:
            halt.audit_record_id = self._record_halt(run, halt)
            raise
        except InteractionCancelled as cancelled:
            cancelled.audit_record_id = self._record_cancel(run, cancelled)
            raise

    def warm_prompt(self, npc_id: str, context: InteractionContext | None = None) -> Prompt:
        """What every prompt of the NPC holds before its new message, as its next interaction
        would assemble it (`context`, by default a player's line outside a scene): a backend
        warms its cache with it (`InferenceBackend.warm`). Reads memory, writes nothing;
        `UnknownNpcError` if no such NPC."""
        context = context or InteractionContext(npc_id=npc_id, trigger_reason=TriggerReason.PLAYER_UTTERANCE)
        run = self._prepare(context, quiet=True)
        return assemble_prompt(run.first_snapshot, self.config.prompt_boundary).before_new_message()

    def recall(self, context: InteractionContext) -> tuple[ScoredEpisode, ...]:
        """The memories the prompt for `context` would hold, best first: what the NPC would
        remember if asked now. Reads memory, writes nothing; `UnknownNpcError` if no such NPC."""
        return self._prepare(context, quiet=True).first_snapshot.episodic

    def consolidate(self, npc_id: str) -> InteractionResult | None:
        """Summarise what the NPC is about to forget (`consolidation`), when its memory is near
        its limit: the model writes notes, the gate checks them, the approved ones replace the
        fading entries, with an audit record (a refused summary is recorded and changes
        nothing). None when nothing was due or the model could not answer. Must not overlap the
        NPC's interactions (the sidecar runs it in the NPC's queue); `UnknownNpcError`."""
        try:
            view = self.store.view(npc_id)
        except UnknownScopeError:
            raise UnknownNpcError(f"no NPC {npc_id!r} is registered") from None
        try:
            summary = summaries.summarise(view, self.store.policy, self.backend)
        except BackendError as exc:
            self._count("consolidation.no_model")
            _log.info("consolidation of %s skipped: %s", npc_id, exc)
            return None
        if summary is None:
            return None
        self._count("consolidation.written" if summary.writes else "consolidation.refused")
        with self.committer.lock:
            return self.committer.consolidation(view, summary.writes, summary.prompt.full, partial(summary.result, view))

    def _record_halt(self, run: InteractionRun, halt: LifecycleHalt) -> str | None:
        """The black box keeps halted interactions too: a record with the inputs, the attempts
        so far and the invariant that broke, committed with no memory change (the interaction
        does not count). Returns the record's id; None without a recorder."""
        self._count("halted")
        self._count(f"halted.{halt.phase}")
        if self.recorder is None:
            return None
        result = self.committer.ending(
            run,
            "halt",
            [],
            lambda hash_after: run.result(
                InteractionOutcome.HALTED, "", memory_hash_after=hash_after, halt_reason=f"{halt.phase}: {halt.reason}"
            ),
            complete=False,
        )
        return result.audit_record_id

    def _record_cancel(self, run: InteractionRun, cancelled: InteractionCancelled) -> str | None:
        """A cancelled interaction's record: the attempts that finished before the cancel, who
        cancelled and where; no memory change, and the interaction does not count."""
        self._count("cancelled")
        self._count(f"cancelled.{cancelled.by}")
        if self.recorder is None:
            return None
        record = CancelRecord(by=cancelled.by, phase=cancelled.phase, after_ms=round(run.timer.elapsed_ms(), 1))
        result = self.committer.ending(
            run,
            "cancel",
            [],
            lambda hash_after: run.result(InteractionOutcome.CANCELLED, "", memory_hash_after=hash_after, cancelled=record),
            complete=False,
        )
        return result.audit_record_id

    @staticmethod
    def _claim_commit(run: InteractionRun) -> None:
        """The last point a cancel stops the interaction: past it, the reply commits and stands."""
        if run.cancel is not None and not run.cancel.may_commit():
            raise InteractionCancelled("commit", run.cancel.by or "game")

    def _check_deadline(self, run: InteractionRun, phase: str) -> None:
        if run.deadline_ns is not None and self.clock() > run.deadline_ns:
            self._count("deadline_exceeded", 1)
            raise DeadlineExceeded(phase)

    # --- phases ----------------------------------------------------------------------------

    def _prepare(self, context: InteractionContext, *, quiet: bool = False) -> InteractionRun:
        """intake -> contract -> expectancy -> sufficiency -> snapshot (`preparation`). `quiet`:
        for a warm-up, which reports nothing of the interaction it only anticipates."""
        timer = PhaseTimer(self.clock)
        try:
            view = self.store.view(context.npc_id, also=listeners(context))
        except UnknownScopeError as exc:
            raise UnknownNpcError(str(exc)) from None
        return prepare(
            view,
            context,
            timer=timer,
            max_attempts=self.config.retry.max_attempts,
            decay=self.store.policy.episodic_decay,
            sampling=self.backend.sampling(),
            on_mistyped=None if quiet else self._report_mistyped,
        )

    def _report_mistyped(self, ctx: InteractionContext, keys: tuple[str, ...]) -> None:
        self._count("state_type_mismatch")
        _log.warning(
            "interaction for %s: world state %s has the wrong type for a rule's condition; asking the game to clarify",
            ctx.npc_id, ", ".join(keys),
        )  # fmt: skip

    def _attempts(self, run: InteractionRun) -> tuple[GateResult | None, tuple[GateFailure, ...], str]:
        """[prompt -> inference -> gate] (`attempt`) until one is accepted or the fallback is
        due, retried with escalation. Returns the accepted gate result (or None), warnings
        accepted with it, and why a fallback is needed."""
        snapshot = run.first_snapshot
        judge = self.judge if self.config.gate.semantic_judge else None
        offered = snapshot.offered_intents
        steers = self._steers_retries()
        carry = StreamCarry()
        while True:
            released = carry.released
            if released is not None and self.time_decisions.out_of_time_after_release(run, snapshot.attempt):
                return released, released.failures, ""  # words are out: they are the reply
            if snapshot.attempt == 1:
                self._check_deadline(run, "inference.1")  # past before it began: nothing to answer
            if self.time_decisions.over_time_budget(run, snapshot.attempt):
                return None, (), "time_budget"
            if run.cancel is not None and run.cancel.stops_before(f"inference.{snapshot.attempt}"):
                raise InteractionCancelled(f"inference.{snapshot.attempt}", run.cancel.by or "game")
            attempted = run_attempt(
                run,
                snapshot,
                carry,
                backend=self.backend,
                time_decisions=self.time_decisions,
                config=self.config,
                offered=offered,
                judge=judge,
                special_tokens=self._special_tokens(),
                count=self._count,
            )
            if isinstance(attempted, GiveUp):
                return None, (), attempted.reason
            stream_text = run.stream.released if run.stream is not None else ""
            step = next_step(attempted, snapshot, carry, released=stream_text, steers=steers)
            if isinstance(step, Accept):
                return step.gate, step.gate.failures, ""
            if isinstance(step, GiveUp):
                return None, (), step.reason
            if step.continues:
                self._count("stream_continued", 1)
            self._count("retries", 1)
            if offered and keeps_decline(run.attempts, step.failures, snapshot):
                offered = ()  # the retry may say no again, in other words, and grant nothing
                self._count("retry_kept_decline", 1)
            carry = step.carry
            escalated = escalate(snapshot.constraints, step.failures, self.config.retry.escalation)
            snapshot = snapshot.for_retry(escalated, repair_message(step.failures))

    def _steers_retries(self) -> bool:
        """Whether a retry may be given its output's start: the released words to go on from,
        and a rejected opening not to begin with again (the sentence that cut a stream, or the
        start of a reply rejected for copying)."""
        return self.config.streaming.continue_after_cut and self.backend.continues_output

    # --- endings ---------------------------------------------------------------------------

    def _apply(self, run: InteractionRun, gate: GateResult, warnings: tuple[GateFailure, ...]) -> InteractionResult:
        output = gate.output
        if output is None or not gate.accepted:
            raise LifecycleHalt("mutation", "the gate result to apply was not accepted or has no output")
        writes = plan_writes(
            gate.approved_mutations,
            npc_id=run.ctx.npc_id,
            npc_name=run.view.profile.name,
            interaction_index=run.interaction_index,
            memory=self.store.scope(run.ctx.npc_id),
            player_input=run.ctx.player_input,
            dialogue=output.dialogue,
            emotion=output.emotion,
            turn_message=run.turn_message,
            raw_output=run.attempts[-1].raw_output if run.attempts else "",
            scene=run.ctx.scene_turn,
        ) + self._heard(run, output.dialogue)
        canonical = run.first_snapshot.canonical_ids()
        for write in writes:
            if isinstance(write.op, UpsertBelief) and write.op.belief_id in canonical:
                raise LifecycleHalt("mutation", f"an approved write targets canonical fact {write.op.belief_id}")
        self._claim_commit(run)
        overrides = sum(1 for r in gate.rejected_mutations if r.canonical_override)
        result = self.committer.ending(
            run,
            "mutation",
            writes,
            lambda hash_after: run.result(
                InteractionOutcome.VALIDATED,
                output.dialogue,
                emotion=output.emotion,
                intents=gate.approved_intents,
                memory_hash_after=hash_after,
                applied_mutations=gate.approved_mutations,
                rejected_mutations=gate.rejected_mutations,
                canonical_override_attempts=overrides,
                warnings=warnings,
            ),
        )
        self._count("validated", 1)
        self._count("canonical_override_blocked", overrides)
        self._count("mutations_applied", len(gate.approved_mutations))
        self._count("mutations_rejected", len(gate.rejected_mutations))
        return result

    def _fallback(self, run: InteractionRun, reason: str) -> InteractionResult:
        # Checked against the designer's rules active in this interaction (the first attempt's:
        # retry escalations describe the model's mistakes, not a line the designer wrote).
        snapshot = run.first_snapshot
        # the NPC's fallbacks so far: each interaction that wrote no exchange to memory
        position = max(0, run.interaction_index - snapshot.exchanges_held)
        rules, secrets, last = snapshot.constraints.constraints, snapshot.secrets, run.view.last_fallback
        choice = deal_fallback(run.view.profile, snapshot.deals, position, rules, secrets, last) or choose_fallback(
            run.view.profile, run.view.world, run.ctx.trigger_reason, position, rules, secrets, last_said=last
        )
        # A sale the rules made stands whatever the model wrote: the game still gets it.
        sold = tuple(deal.granted_intent() for deal in snapshot.deals if deal.granted)[:1]
        self._claim_commit(run)
        # The interaction still counts (it picks the next line and seed; the store keeps the line
        # said); the NPC's memory does not change (in a scene, those present remember the line).
        result = self.committer.ending(
            run,
            "fallback",
            self._heard(run, choice.text),
            lambda hash_after: run.result(
                InteractionOutcome.FALLBACK,
                choice.text,
                intents=sold,
                memory_hash_after=hash_after,
                fallback_reason=f"{reason} -> {choice.source}",
                skipped_fallbacks=choice.skipped,
                backend_failure=run.backend_failure,
            ),
            fallback_line=choice.text or None,  # silence is no line to pass over
        )
        self._count("fallback", 1)
        self._count(f"fallback.{choice.source}", 1)
        if choice.skipped:
            self._count("fallback_lines_skipped", len(choice.skipped))
        return result

    @staticmethod
    def _heard(run: InteractionRun, dialogue: str) -> list:
        """In a scene, the spoken line as a memory of each NPC present (none outside one)."""
        scene = run.ctx.scene_turn
        if scene is None or not scene.present or not dialogue:
            return []
        line = SceneLine(kind="npc", npc_id=run.ctx.npc_id, speaker=run.view.profile.name, text=dialogue)
        return heard_writes(scene, line, run.view.others)

    def _clarify(self, run: InteractionRun) -> InteractionResult:
        # Nothing counts and nothing changes; the record still goes in the log.
        result = self.committer.ending(
            run,
            "clarify",
            [],
            lambda hash_after: run.result(InteractionOutcome.CLARIFY, "", memory_hash_after=hash_after),
            complete=False,
        )
        self._count("clarify", 1)
        return result
