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
from dataclasses import dataclass, field, replace

from pydantic import Field

from loreguard.memory.audit_log import AuditEntry
from loreguard.memory.errors import StalePlanError, UnknownScopeError
from loreguard.memory.hashing import canonical_json, sha256_hex
from loreguard.memory.store import MemoryStore, PlannedBatch, StoreView
from loreguard.schemas.audit import AuditTimings
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.interaction import InteractionContext, TriggerReason
from loreguard.schemas.memory import UpsertBelief
from loreguard.schemas.output import Emotion, WorldIntent
from loreguard.schemas.receipt import (
    AttemptRecord,
    GateFailure,
    InteractionOutcome,
    InteractionResult,
    PhaseTiming,
    Receipt,
)
from loreguard.schemas.rules import Severity
from loreguard.server.pipeline.contract import Sufficiency, Verdict, check_sufficiency, contract_for, vocabulary
from loreguard.server.pipeline.errors import DeadlineExceeded, InteractionCancelled, LifecycleHalt, UnknownNpcError
from loreguard.server.pipeline.expectancy import evaluate_rules
from loreguard.server.pipeline.fallback import choose_fallback
from loreguard.server.pipeline.gate import GateConfig, GateResult, validate
from loreguard.server.pipeline.inference.base import BackendError, Generation, GenerationRequest, InferenceBackend
from loreguard.server.pipeline.interaction import intake
from loreguard.server.pipeline.judge import SemanticJudge
from loreguard.server.pipeline.mutation import plan_writes
from loreguard.server.pipeline.output_schema import GenerationLimits, output_schema
from loreguard.server.pipeline.parsing import parse_output
from loreguard.server.pipeline.prompt import Prompt, PromptBoundary, assemble_prompt
from loreguard.server.pipeline.retry import RetryPolicy, escalate, repair_message
from loreguard.server.pipeline.sink import AuditSink
from loreguard.server.pipeline.snapshot import StateSnapshot, build_snapshot, merged_state
from loreguard.server.pipeline.streaming import IncrementalGate, StreamingConfig, StreamSession, continuation_prefix

_log = logging.getLogger("loreguard.pipeline")

#: Plans a commit may make before giving up: each new plan follows another batch's commit, so
#: reaching this means the store is being written in a tight loop.
_MAX_PLANS = 16


class PipelineConfig(FrozenModel):
    retry: RetryPolicy = RetryPolicy()
    prompt_boundary: PromptBoundary = PromptBoundary.AFTER_CANONICAL
    gate: GateConfig = GateConfig()
    #: Bounds of what the model may write; they also bound constrained decoding.
    generation: GenerationLimits = GenerationLimits()
    #: Token cap for backends that cannot constrain decoding to the output schema.
    max_tokens: int = 320
    #: With the semantic judge on (`gate.semantic_judge`): how long its model may take before
    #: the keyword check stands in.
    judge_timeout_ms: int = Field(default=3000, ge=1)
    #: How a streamed interaction cuts its reply into chunks (`interact` with `stream`).
    streaming: StreamingConfig = StreamingConfig()


class _Timer:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.start = self.last = clock()
        self.phases: list[PhaseTiming] = []

    def lap(self, phase: str) -> None:
        now = self.clock()
        self.phases.append(PhaseTiming(phase=phase, duration_us=(now - self.last) // 1000))
        self.last = now

    def elapsed_ms(self) -> float:
        return (self.clock() - self.start) / 1e6


@dataclass
class _Run:
    """Per-interaction state the endings need."""

    #: The context as the game sent it (the audit record keeps it for replay).
    received: InteractionContext
    ctx: InteractionContext
    view: StoreView
    interaction_index: int
    seed: int
    scopes: tuple[str, ...]
    hash_before: str
    task_type: str
    sufficiency: Sufficiency
    first_snapshot: StateSnapshot
    timer: _Timer
    attempts: list[AttemptRecord] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    ttft_ms: float = 0.0
    manifest: str = ""
    context_keys: tuple[str, ...] = ()
    deadline_ns: int | None = None
    #: The player's message as the latest attempt's prompt ended on it (with its correction, if
    #: any): the conversation replays the accepted attempt's turn word for word on later turns,
    #: which is what the engine has cached.
    turn_message: str = ""
    #: The backend's sampler settings besides the seed (repetition penalties, DRY).
    sampling: dict[str, float | int] = field(default_factory=dict)
    stream: StreamSession | None = None

    def receipt(self, **fields: object) -> Receipt:
        return Receipt(
            npc_id=self.ctx.npc_id,
            interaction_index=self.interaction_index,
            seed=self.seed,
            sampling=self.sampling,
            task_type=self.task_type,
            manifest=self.manifest,
            context_keys=self.context_keys,
            constraints=self.first_snapshot.constraints.ids(),
            sufficiency=self.sufficiency.verdict.value,
            missing=self.sufficiency.missing,
            derived=self.sufficiency.derived,
            mistyped=self.sufficiency.mistyped,
            attempts=tuple(self.attempts),
            memory_hash_before=self.hash_before,
            snapshot_hash=self.first_snapshot.snapshot_hash(),
            constraints_hash=self.first_snapshot.constraints.hash(),
            timings=tuple(self.timer.phases),
            **fields,
        )

    def result(
        self,
        outcome: InteractionOutcome,
        dialogue: str,
        *,
        memory_hash_after: str,
        emotion: Emotion = Emotion.NEUTRAL,
        intents: tuple[WorldIntent, ...] = (),
        **receipt_fields: object,
    ) -> InteractionResult:
        """The reply and its receipt, which share outcome, attempts and fallback flag."""
        fallback_used = outcome is InteractionOutcome.FALLBACK
        return InteractionResult(
            npc_id=self.ctx.npc_id,
            outcome=outcome,
            dialogue=dialogue,
            emotion=emotion,
            intents=intents,
            attempts=len(self.attempts),
            fallback_used=fallback_used,
            needs=self.sufficiency.missing if outcome is InteractionOutcome.CLARIFY else (),
            failed_gates=self.failed_gates(),
            receipt=self.receipt(
                outcome=outcome, fallback_used=fallback_used, memory_hash_after=memory_hash_after, **receipt_fields
            ),
        )

    def failed_gates(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for attempt in self.attempts:
            for check in attempt.gates:
                if not check.passed:
                    seen.setdefault(check.gate.value, None)
        return tuple(seen)


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
    ) -> None:
        self.store = store
        self.backend = backend
        self.config = config or PipelineConfig()
        #: With a recorder, every interaction writes an audit record in the same transaction
        #: as its memory batch, or fails with `AuditWriteError` and changes nothing.
        self.recorder = recorder
        # What replay needs to run under the same settings; hashed once, stored once.
        self._config_json = canonical_json(
            {"pipeline": self.config.model_dump(mode="json"), "memory_policy": store.policy.model_dump(mode="json")}
        ).decode("utf-8")
        self._config_hash = sha256_hex(self._config_json)
        self.judge = SemanticJudge(judge_backend, timeout_ms=self.config.judge_timeout_ms)
        self.clock = clock
        self.counters: Counter[str] = Counter()
        self._counters_lock = threading.Lock()
        self._specials: tuple[str, ...] | None = None

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
        self.store.record_correction(rule_id, verdict)

    def interact(
        self, context: InteractionContext, *, deadline_ns: int | None = None, stream: StreamSession | None = None
    ) -> InteractionResult:
        """Run one interaction to exactly one outcome: validated, fallback or clarify.

        Thread-safe for different NPCs: their interactions may run at once (they read and write
        disjoint scopes, and each commit re-plans if another committed first). Interactions of
        one NPC must not overlap; the sidecar's scheduler keeps them in arrival order.

        `deadline_ns` is a time on the pipeline's clock. Past it, no further model call starts
        and nothing is committed: `DeadlineExceeded` is raised with memory unchanged.

        With `stream`, the reply is released chunk by chunk as it passes the incremental gate
        (`streaming`): the chunks always add up to the result's dialogue (a fallback line is one
        chunk); when the session's client leaves, `InteractionCancelled` is raised with nothing
        applied.
        """
        run = self._prepare(context)
        run.deadline_ns = deadline_ns
        if stream is not None:
            stream.clock_ms = run.timer.elapsed_ms
            run.stream = stream
        try:
            if run.sufficiency.verdict is Verdict.CLARIFY:
                return self._clarify(run)
            accepted, warnings, fallback_reason = self._attempts(run)
            if run.stream is None or not run.stream.released:
                # Once words are out they stand: a released reply commits past the deadline.
                self._check_deadline(run, "commit")
            if accepted is not None:
                return self._apply(run, accepted, warnings)
            result = self._fallback(run, fallback_reason)
            if run.stream is not None and result.dialogue:
                run.stream.release(result.dialogue, 0)  # attempt 0: not a model's line
            return result
        except LifecycleHalt as halt:
            halt.audit_record_id = self._record_halt(run, halt)
            raise

    def warm_prompt(self, npc_id: str) -> Prompt:
        """What every prompt of the NPC holds before its new message, as its next interaction
        would assemble it (a player's line, no scene): a backend warms its cache with it
        (`InferenceBackend.warm`). Reads memory, writes nothing; `UnknownNpcError` if no such NPC."""
        run = self._prepare(InteractionContext(npc_id=npc_id, trigger_reason=TriggerReason.PLAYER_UTTERANCE), quiet=True)
        return assemble_prompt(run.first_snapshot, self.config.prompt_boundary).before_new_message()

    def _record_halt(self, run: _Run, halt: LifecycleHalt) -> str | None:
        """The black box keeps halted interactions too: a record with the inputs, the attempts
        so far and the invariant that broke, committed with no memory change (the interaction
        does not count). Returns the record's id; None without a recorder."""
        self._count("halted")
        self._count(f"halted.{halt.phase}")
        if self.recorder is None:
            return None
        result = self._commit(
            run,
            "halt",
            [],
            lambda hash_after: run.result(
                InteractionOutcome.HALTED, "", memory_hash_after=hash_after, halt_reason=f"{halt.phase}: {halt.reason}"
            ),
            complete=False,
        )
        return result.audit_record_id

    def _check_deadline(self, run: _Run, phase: str) -> None:
        if run.deadline_ns is not None and self.clock() > run.deadline_ns:
            self._count("deadline_exceeded", 1)
            raise DeadlineExceeded(phase)

    # --- phases ----------------------------------------------------------------------------

    def _prepare(self, context: InteractionContext, *, quiet: bool = False) -> _Run:
        """intake -> contract -> expectancy -> sufficiency -> snapshot. `quiet`: for a warm-up,
        which reports nothing of the interaction it only anticipates."""
        timer = _Timer(self.clock)
        try:
            view = self.store.view(context.npc_id)
        except UnknownScopeError:
            raise UnknownNpcError(f"no NPC {context.npc_id!r} is registered") from None
        profile, world = view.profile, view.world
        taken = intake(context, view.interactions)
        ctx = taken.context
        npc_memory, world_memory = view.npc, view.world_memory
        timer.lap("intake")

        state = merged_state(world_memory, npc_memory)
        vocab = vocabulary(
            state,
            world.state_claims if world else {},
            [c.fact for c in world_memory.canonical + npc_memory.canonical],
            npc_memory.beliefs,
            profile.bounds.belief_threshold,
        )
        contract = contract_for(ctx, vocab)
        timer.lap("contract")

        rules = (world.rules if world else ()) + profile.rules
        behaviour = view.behaviour
        evaluation = evaluate_rules(rules, ctx, taken.interaction_index, state, behaviour, task_type=contract.task_type)
        timer.lap("expectancy")

        sufficiency = check_sufficiency(
            contract, evaluation.missing_state, state, world.state_defaults if world else {}, evaluation.mistyped_state
        )
        if sufficiency.mistyped and not quiet:
            self._count("state_type_mismatch")
            _log.warning(
                "interaction for %s: world state %s has the wrong type for a rule's condition; asking the game to clarify",
                ctx.npc_id, ", ".join(sufficiency.mistyped),
            )  # fmt: skip
        derived = {}
        if sufficiency.verdict is Verdict.RETRY:
            # Re-gather with the derived values; what is still missing after that is the game's to provide.
            derived = dict(sufficiency.derived)
            state = merged_state(world_memory, npc_memory, derived)
            evaluation = evaluate_rules(rules, ctx, taken.interaction_index, state, behaviour, task_type=contract.task_type)
            again = check_sufficiency(contract, evaluation.missing_state, state, {}, evaluation.mistyped_state)
            if again.verdict is not Verdict.PASS:
                sufficiency = again
        timer.lap("sufficiency")

        snapshot = build_snapshot(
            context=ctx,
            interaction_index=taken.interaction_index,
            seed=taken.seed,
            profile=profile,
            profile_hash=view.profile_hash,
            memory_hash=view.scopes_hash,
            world=world,
            npc_memory=npc_memory,
            world_memory=world_memory,
            contract=contract,
            constraints=evaluation.constraints,
            derived=derived,
            max_attempts=self.config.retry.max_attempts,
            decay=self.store.policy.episodic_decay,
        )
        timer.lap("snapshot")
        return _Run(
            sampling=self.backend.sampling(),
            received=context,
            ctx=ctx,
            view=view,
            interaction_index=taken.interaction_index,
            seed=taken.seed,
            scopes=tuple(name for name, _ in view.scope_hashes),
            hash_before=view.memory_hash,
            task_type=contract.task_type.value,
            sufficiency=sufficiency,
            first_snapshot=snapshot,
            timer=timer,
        )

    def _attempts(self, run: _Run) -> tuple[GateResult | None, tuple[GateFailure, ...], str]:
        """prompt -> inference -> gate, retried with escalation. Returns the accepted gate
        result (or None), warnings accepted with it, and why a fallback is needed."""
        snapshot = run.first_snapshot
        policy = self.config.retry
        judge = self.judge.judge if self.config.gate.semantic_judge else None
        schema = output_schema(snapshot.allowed_intents, self.config.generation)
        #: Streamed: the accepted cut output of the words released so far (the answer should no
        #: later attempt add to them), and those words, which a continuing attempt starts with.
        released: GateResult | None = None
        continued = ""
        #: Streamed: the sentence that cut the last attempt, which the next may not begin with.
        avoid = ""
        while True:
            if released is not None and self._out_of_time_after_release(run, snapshot.attempt):
                return released, released.failures, ""  # words are out: they are the reply
            if self._over_time_budget(run, snapshot.attempt):
                return None, (), "time_budget"
            self._check_deadline(run, f"inference.{snapshot.attempt}")
            prompt = assemble_prompt(snapshot, self.config.prompt_boundary)
            if snapshot.attempt == 1:
                run.manifest, run.context_keys = prompt.manifest, prompt.context_keys
            run.timer.lap(f"prompt.{snapshot.attempt}")
            request = GenerationRequest(
                npc_id=run.ctx.npc_id,
                prompt=prompt,
                seed=snapshot.seed + snapshot.attempt - 1,
                max_tokens=self.config.max_tokens,
                output_schema=schema,
                output_prefix=continuation_prefix(continued) if continued or avoid else "",
                avoid_start=avoid,
            )
            watcher = None
            if run.stream is not None:
                watcher = IncrementalGate(
                    session=run.stream,
                    snapshot=snapshot,
                    config=self.config.gate,
                    hygiene=run.view.profile.output_hygiene,
                    streaming=self.config.streaming,
                    hold_all=judge is not None,
                    special_tokens=self._special_tokens(),
                    continued=len(continued),
                    avoided=avoid,
                    safe=released,
                )
            try:
                if watcher is None:
                    generation = self.backend.generate(request)
                else:
                    generation = self.backend.generate_streaming(request, watcher.observe)
            except BackendError as exc:
                run.timer.lap(f"inference.{snapshot.attempt}")
                if watcher is None or watcher.safe is None:
                    return None, (), f"backend: {exc}"
                # Text is out: the reply is what was released (the cut says why it stopped).
                watcher.backend_failed(str(exc))
                generation = Generation(text=watcher.last_raw, finish_reason="aborted")
            run.timer.lap(f"inference.{snapshot.attempt}")
            if run.stream is not None and run.stream.cancelled:
                self._count("stream_cancelled", 1)
                raise InteractionCancelled(f"inference.{snapshot.attempt}")
            run.prompts.append(prompt.full)
            if snapshot.attempt == 1:
                run.ttft_ms = generation.ttft_ms
            run.turn_message = prompt.player_turn

            parse = parse_output(generation.text)
            gate: GateResult | None
            if watcher is not None and watcher.failed is not None:
                gate = None  # a sentence failed: the generation was stopped there
            else:
                gate = validate(
                    parse,
                    generation.text,
                    snapshot,
                    self.config.gate,
                    judge,
                    run.view.profile.output_hygiene,
                    self._special_tokens(),
                )
            if watcher is not None:
                judged = gate if gate is not None else watcher.failed
                gate = watcher.finish(gate) or watcher.failed
                if watcher.cut is not None:
                    self._count("stream_cut", 1)
                assert gate is not None and judged is not None
                record_gate = judged
            else:
                assert gate is not None
                record_gate = gate
            run.attempts.append(
                AttemptRecord(
                    attempt=snapshot.attempt,
                    prompt_hash=prompt.prompt_hash(),
                    raw_output=generation.text,
                    output_hash=sha256_hex(generation.text),
                    parse_path=parse.path,
                    gates=record_gate.checks,
                    failures=record_gate.failures,
                    findings=record_gate.findings,
                    tokens_evaluated=generation.tokens_evaluated,
                    tokens_generated=generation.tokens_generated,
                    stream=watcher.record(generation.finish_reason == "aborted") if watcher is not None else None,
                )
            )
            for failure in record_gate.failures:
                self._count(f"gate_failed.{failure.gate.value}", 1)
            run.timer.lap(f"gate.{snapshot.attempt}")

            if watcher is not None and watcher.cut is not None and gate is watcher.safe:
                # Cut after words were released: go on from them, or end the reply there.
                if not self._continue_after_cut(snapshot, record_gate, watcher):
                    return gate, gate.failures, ""
                released, continued = watcher.safe, run.stream.released if run.stream is not None else ""
                failures = record_gate.failures
                self._count("stream_continued", 1)
            else:
                if gate.accepted:
                    return gate, gate.failures, ""  # soft rules bend on the last attempt, with a warning
                if gate.critical:
                    reasons = "; ".join(f.reason for f in gate.failures if f.severity is Severity.CRITICAL)
                    return None, (), "critical: " + reasons
                if not snapshot.can_retry:
                    return None, (), "attempts_exhausted"
                failures = gate.failures
            # A streamed retry may not begin with the sentence that cut the last attempt, when
            # that sentence began where the retry begins (after the words it continues, if any).
            steer = watcher is not None and self._steers_retries() and watcher.failed_from == len(continued)
            avoid = watcher.failed_sentence if steer and watcher is not None else ""
            self._count("retries", 1)
            snapshot = snapshot.for_retry(escalate(snapshot.constraints, failures, policy.escalation), repair_message(failures))

    def _continue_after_cut(self, snapshot: StateSnapshot, judged: GateResult, watcher: IncrementalGate) -> bool:
        """Whether a streamed attempt cut after releasing words is followed by an attempt that
        continues them (`StreamingConfig.continue_after_cut`): only for a failure a repair can
        name, with attempts left, and a backend that can continue an output."""
        return (
            self._steers_retries()
            and snapshot.can_retry
            and not watcher.backend_error
            and bool(judged.failures)
            and not judged.critical
        )

    def _steers_retries(self) -> bool:
        """Whether a streamed retry may be given its output's start: the released words to go on
        from, and the rejected sentence not to begin with again."""
        return self.config.streaming.continue_after_cut and self.backend.continues_output

    def _out_of_time_after_release(self, run: _Run, attempt: int) -> bool:
        """Whether a streamed reply whose words are out ends at them instead of trying `attempt`
        from them: the retry budget or the interaction's deadline is spent. A replay takes it
        from the record."""
        past_deadline = run.deadline_ns is not None and self.clock() > run.deadline_ns
        return self._over_time_budget(run, attempt) or past_deadline

    def _over_time_budget(self, run: _Run, attempt: int) -> bool:
        """Whether the retry budget's wall-clock time is spent before `attempt` starts. The one
        decision that reads a clock: a replay takes it from the record instead."""
        return run.timer.elapsed_ms() > self.config.retry.time_budget_ms

    # --- endings ---------------------------------------------------------------------------

    def _apply(self, run: _Run, gate: GateResult, warnings: tuple[GateFailure, ...]) -> InteractionResult:
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
        )
        canonical = run.first_snapshot.canonical_ids()
        for write in writes:
            if isinstance(write.op, UpsertBelief) and write.op.belief_id in canonical:
                raise LifecycleHalt("mutation", f"an approved write targets canonical fact {write.op.belief_id}")
        overrides = sum(1 for r in gate.rejected_mutations if r.canonical_override)
        result = self._commit(
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

    def _fallback(self, run: _Run, reason: str) -> InteractionResult:
        # Checked against the designer's rules active in this interaction (the first attempt's:
        # retry escalations describe the model's mistakes, not a line the designer wrote).
        snapshot = run.first_snapshot
        choice = choose_fallback(
            run.view.profile,
            run.view.world,
            run.ctx.trigger_reason,
            run.interaction_index,
            snapshot.constraints.constraints,
            snapshot.secrets,
        )
        # The interaction still counts (it picks the next line and seed); memory does not change.
        result = self._commit(
            run,
            "fallback",
            [],
            lambda hash_after: run.result(
                InteractionOutcome.FALLBACK,
                choice.text,
                memory_hash_after=hash_after,
                fallback_reason=f"{reason} -> {choice.source}",
                skipped_fallbacks=choice.skipped,
            ),
        )
        self._count("fallback", 1)
        self._count(f"fallback.{choice.source}", 1)
        if choice.skipped:
            self._count("fallback_lines_skipped", len(choice.skipped))
        return result

    def _clarify(self, run: _Run) -> InteractionResult:
        # Nothing counts and nothing changes; the record still goes in the log.
        result = self._commit(
            run,
            "clarify",
            [],
            lambda hash_after: run.result(InteractionOutcome.CLARIFY, "", memory_hash_after=hash_after),
            complete=False,
        )
        self._count("clarify", 1)
        return result

    def _commit(
        self,
        run: _Run,
        phase: str,
        writes: list,
        build: Callable[[str], InteractionResult],
        *,
        complete: bool = True,
    ) -> InteractionResult:
        """Plan the ending's batch, build the reply from the memory hash it leads to and, with a
        recorder, the audit record; then commit batch and record in one short transaction."""
        complete_interaction = run.ctx.npc_id if complete else None
        recorder = self.recorder
        if recorder is None and not writes and complete_interaction is None:
            # A clarify without a record has nothing to write.
            run.timer.lap(phase)
            return build(self.store.memory_hash(run.scopes))
        for plans in range(_MAX_PLANS):
            planned = self.store.plan(writes, complete_interaction=complete_interaction, hash_scopes=run.scopes)
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
