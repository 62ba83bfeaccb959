"""One interaction in flight: what the lifecycle's phases learn and its endings need, its phase
timer, and the two decisions that read a clock.

The run is plain per-interaction state; nothing in it is shared between interactions. Its
receipt and result are built from it, so every ending describes the same attempts, hashes and
timings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from loreguard.memory.store import StoreView
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.output import Emotion, WorldIntent
from loreguard.schemas.receipt import AttemptRecord, InteractionOutcome, InteractionResult, PhaseTiming, Receipt
from loreguard.server.inference.base import Generation
from loreguard.server.pipeline.contract import Sufficiency
from loreguard.server.pipeline.running.cancel import Cancellation
from loreguard.server.pipeline.running.pacing import DecodeSpeed, first_attempt_chars
from loreguard.server.pipeline.running.streaming import StreamSession
from loreguard.server.pipeline.snapshot import StateSnapshot


class PhaseTimer:
    """Durations of the phases, each from the end of the one before (metadata, never hashed)."""

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
class InteractionRun:
    """Per-interaction state the attempts and the endings need."""

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
    timer: PhaseTimer
    attempts: list[AttemptRecord] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    ttft_ms: float = 0.0
    manifest: str = ""
    context_keys: tuple[str, ...] = ()
    #: When the interaction must be answered, on the pipeline's clock; None: no deadline.
    deadline_ns: int | None = None
    #: When a generation still running is cut and no attempt may start: the deadline less the
    #: time the answer needs to commit (`PipelineConfig.deadline_margin_ms`); None: no deadline.
    cut_ns: int | None = None
    #: The retry budget's wall-clock time (`RetryPolicy.time_budget_ms`).
    time_budget_ms: float = math.inf
    #: The player's message as the latest attempt's prompt ended on it (with its correction, if
    #: any): the conversation replays the accepted attempt's turn word for word on later turns,
    #: which is what the engine has cached.
    turn_message: str = ""
    #: The backend's sampler settings besides the seed (repetition penalties, DRY).
    sampling: dict[str, float | int] = field(default_factory=dict)
    stream: StreamSession | None = None
    #: The interaction's cancel switch (`cancel`); None: it cannot be cancelled.
    cancel: Cancellation | None = None
    #: Why the model could not answer, when it could not (`Receipt.backend_failure`).
    backend_failure: str | None = None

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
            unevaluable_rules=self.sufficiency.rules,
            attempts=tuple(self.attempts),
            memory_hash_before=self.hash_before,
            snapshot_hash=self.first_snapshot.snapshot_hash(),
            constraints_hash=self.first_snapshot.constraints.hash(),
            deals=tuple(deal.record() for deal in self.first_snapshot.deals),
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


class TimeDecisions(Protocol):
    """The only decisions of an interaction that read a clock. A live pipeline reads its own
    (`ClockTimeDecisions`); a replay takes them from the record, so a recorded interaction that
    ran out of time does so after the same attempts however fast the replay runs."""

    def over_time_budget(self, run: InteractionRun, attempt: int) -> bool:
        """Whether the time for attempts is spent before `attempt` starts (or when a generation
        ended in a timeout): the retry budget's wall-clock time, or the interaction's deadline
        less its commit margin (`InteractionRun.cut_ns`)."""
        ...

    def out_of_time_after_release(self, run: InteractionRun, attempt: int) -> bool:
        """Whether a streamed reply whose words are out ends at them instead of trying `attempt`
        from them: the retry budget or the interaction's deadline is spent."""
        ...

    def generation_timeout_ms(self, run: InteractionRun) -> int | None:
        """How long a model call starting now may take before it is cut (the generation's, the
        judge's): the time left to `InteractionRun.cut_ns`, at least 1 ms; None: no limit."""
        ...

    def dialogue_chars(self, run: InteractionRun, attempt: int, limit: int) -> int:
        """The dialogue's length bound for `attempt`: `limit`, or fewer characters for a first
        attempt that would otherwise leave no time for a second (`pacing`)."""
        ...

    def observe(self, generation: Generation) -> None:
        """A generation ran: what its speed says of the next ones."""
        ...


class ClockTimeDecisions:
    """Time decisions as a live interaction makes them: the run's timer against its retry
    budget and its deadline (both on the pipeline's clock, which the timer reads), and the
    backend's decode speed as measured (`pacing.DecodeSpeed`)."""

    def __init__(self) -> None:
        self.speed = DecodeSpeed()

    def dialogue_chars(self, run: InteractionRun, attempt: int, limit: int) -> int:
        if attempt > 1:
            return limit
        left_ms = run.time_budget_ms - run.timer.elapsed_ms()
        if run.cut_ns is not None:
            left_ms = min(left_ms, (run.cut_ns - run.timer.clock()) / 1_000_000)
        return first_attempt_chars(left_ms, self.speed.tokens_per_s(), limit)

    def observe(self, generation: Generation) -> None:
        self.speed.observe(generation)

    def over_time_budget(self, run: InteractionRun, attempt: int) -> bool:
        past_cut = run.cut_ns is not None and run.timer.clock() >= run.cut_ns
        return past_cut or run.timer.elapsed_ms() > run.time_budget_ms

    def out_of_time_after_release(self, run: InteractionRun, attempt: int) -> bool:
        return self.over_time_budget(run, attempt)

    def generation_timeout_ms(self, run: InteractionRun) -> int | None:
        if run.cut_ns is None:
            return None
        return max(1, math.ceil((run.cut_ns - run.timer.clock()) / 1_000_000))
