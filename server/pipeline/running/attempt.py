"""One attempt: prompt -> inference -> gate, and what follows it.

`run_attempt` assembles the prompt from the attempt's snapshot, asks the backend (streamed
through the incremental gate when the interaction streams), validates the output and records
the attempt on the run. `next_step` decides from that alone what the lifecycle does next:
accept, give up (the fallback's reason), or retry with escalated rules and a repair message,
carrying forward what a streamed retry needs (`StreamCarry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loreguard.memory.hashing import sha256_hex
from loreguard.schemas.output import NO_INTENT
from loreguard.schemas.prevention import DialogueConstraints
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import AttemptRecord, GateFailure
from loreguard.schemas.rules import Severity
from loreguard.server.inference.base import (
    BackendBusy,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    Generation,
    GenerationRequest,
    InferenceBackend,
    Observer,
)
from loreguard.server.pipeline.errors import InteractionCancelled
from loreguard.server.pipeline.gate import GateResult, validate
from loreguard.server.pipeline.gate.deeds import GRANTS_IN_WORDS_ONLY_RULE
from loreguard.server.pipeline.gate.parroting import PARROTING_RULE
from loreguard.server.pipeline.gate.prevention import dialogue_constraints
from loreguard.server.pipeline.gate.self_repeats import REPEATS_ITSELF_RULE
from loreguard.server.pipeline.parsing import ParseResult, parse_output
from loreguard.server.pipeline.prompt import assemble_prompt
from loreguard.server.pipeline.running.cancel import Cancellation
from loreguard.server.pipeline.running.config import PipelineConfig
from loreguard.server.pipeline.running.judge import SemanticJudge
from loreguard.server.pipeline.running.repair import cut_repair
from loreguard.server.pipeline.running.run_state import InteractionRun, TimeDecisions
from loreguard.server.pipeline.running.streaming import IncrementalGate, chunk_ends, continuation_prefix
from loreguard.server.pipeline.snapshot import StateSnapshot
from loreguard.server.pipeline.turn.intents import OfferedIntent
from loreguard.server.pipeline.turn.output_schema import output_schema

#: Counts an event on the pipeline's counters (name, amount).
Count = Callable[[str, int], None]


@dataclass(frozen=True)
class StreamCarry:
    """What a streamed retry takes from the attempts before it (empty without streaming)."""

    #: The accepted cut output of the words released so far: the answer, should no later
    #: attempt add to them.
    released: GateResult | None = None
    #: Those words, which a continuing attempt starts with.
    continued: str = ""
    #: The sentence that cut the last attempt, which the next may not begin with.
    avoid: str = ""


@dataclass(frozen=True)
class Attempted:
    """One attempt's outcome, already recorded on the run."""

    #: What decides the interaction: the whole output's gate result or, for a streamed attempt
    #: cut after a release, the last accepted cut (`watcher.safe`).
    gate: GateResult
    #: What the gate found, as the attempt record keeps it.
    judged: GateResult
    #: The incremental gate of a streamed attempt; None otherwise.
    watcher: IncrementalGate | None


def _request(
    run: InteractionRun,
    snapshot: StateSnapshot,
    carry: StreamCarry,
    prompt: Prompt,
    schema: dict[str, Any],
    max_tokens: int,
    timeout_ms: int | None,
    guarded: bool,
) -> GenerationRequest:
    """What attempt `snapshot.attempt` asks the model for."""
    return GenerationRequest(
        npc_id=run.ctx.npc_id,
        prompt=prompt,
        seed=snapshot.seed + snapshot.attempt - 1,  # a retry samples anew
        max_tokens=max_tokens,
        output_schema=schema,
        output_prefix=continuation_prefix(carry.continued) if carry.continued or carry.avoid else "",
        avoid_start=carry.avoid,
        timeout_ms=timeout_ms,
        said_before=said_before(snapshot, run.attempts),
        constraints=dialogue_constraints(snapshot) if guarded else DialogueConstraints(),
    )


#: The NPC's recent replies a generation is told it said (`GenerationRequest.said_before`): the
#: newest few, which fit DRY's window (`LlamaCppConfig.dry_last_n` tokens) beside the reply.
SAID_BEFORE_REPLIES = 8


def said_before(snapshot: StateSnapshot, attempts: list[AttemptRecord]) -> tuple[str, ...]:
    """What the NPC said before this attempt, oldest first: its newest replies, then what this
    interaction's earlier attempts wrote (a retry that says the refused line again is refused
    again)."""
    replies = [r.dialogue for r in reversed(snapshot.recent_replies[:SAID_BEFORE_REPLIES]) if r.dialogue]
    written = [_dialogue(a.raw_output) for a in attempts]
    return tuple(replies + [text for text in written if text])


def _dialogue(raw: str) -> str:
    """An output's dialogue ("" when it has none)."""
    data = parse_output(raw).data or {}
    dialogue = data.get("dialogue")
    return dialogue if isinstance(dialogue, str) else ""


def run_attempt(
    run: InteractionRun,
    snapshot: StateSnapshot,
    carry: StreamCarry,
    *,
    backend: InferenceBackend,
    time_decisions: TimeDecisions,
    config: PipelineConfig,
    offered: tuple[OfferedIntent, ...],
    judge: SemanticJudge | None,
    special_tokens: tuple[str, ...],
    count: Count,
) -> Attempted | GiveUp:
    """Attempt number `snapshot.attempt`: its prompt, generation and gate, appended to
    `run.attempts` (and `run.prompts`); `GiveUp` when the backend failed before any word was
    out, or the deadline cut the generation (`_gave_up`). Raises `InteractionCancelled` when
    the stream's client left during the generation. `offered`: the intents its output may
    grant (`keeps_decline`: none)."""
    n = snapshot.attempt
    limit = config.generation.dialogue_chars
    chars = time_decisions.dialogue_chars(run, n, limit)
    count("dialogue_bounded", int(chars < limit))
    limits = config.generation if chars >= limit else config.generation.model_copy(update={"dialogue_chars": chars})
    schema = output_schema(offered, limits)
    prompt = assemble_prompt(snapshot, config.prompt_boundary)
    run.timer.lap(f"prompt.{n}")
    timeout_ms = time_decisions.generation_timeout_ms(run)
    guarded = config.gate.prevent_in_sampler and backend.guards_dialogue
    request = _request(run, snapshot, carry, prompt, schema, config.max_tokens, timeout_ms, guarded)
    watcher = _incremental_gate(run, snapshot, carry, config, judge is not None, special_tokens, chars)
    try:
        generation = _generate(backend, request, watcher, run.cancel)
    except BackendError as exc:
        run.timer.lap(f"inference.{n}")
        cut = isinstance(exc, BackendTimeout) and request.timeout_ms is not None and time_decisions.over_time_budget(run, n)
        return _gave_up(run, prompt, n, exc, cut=cut, count=count)
    run.timer.lap(f"inference.{n}")
    time_decisions.observe(generation)
    _stop_if_cancelled(run, n, count)
    run.prompts.append(prompt.full)
    if n == 1:
        run.manifest, run.context_keys = prompt.manifest, prompt.context_keys
        run.ttft_ms = generation.ttft_ms
    run.turn_message = prompt.player_turn

    parse = parse_output(generation.text)
    whole: GateResult | None = None
    if watcher is None or watcher.failed is None:  # else a sentence failed: the generation stopped there
        hygiene = run.view.profile.output_hygiene
        time_left_ms = time_decisions.generation_timeout_ms(run)
        asked = judge.for_reply(prompt, generation.text, time_left_ms) if judge is not None else None
        whole = validate(parse, generation.text, snapshot, config.gate, asked, hygiene, special_tokens, chars)
    gate, judged = _decided(whole, watcher)
    cut_to = None
    if watcher is None and whole is not None and judge is None:
        repaired = cut_repair(whole, parse, snapshot, config.gate, run.view.profile.output_hygiene, special_tokens, chars)
        if repaired is not None:
            gate, cut_to = repaired
            count("cut_repaired", 1)
    if watcher is not None and watcher.cut is not None:
        count("stream_cut", 1)
    bound = chars if chars < limit else None
    run.attempts.append(_record(n, prompt, generation, parse, judged, watcher, bound).model_copy(update={"cut_to": cut_to}))
    for failure in judged.failures:
        count(f"gate_failed.{failure.gate.value}", 1)
    run.timer.lap(f"gate.{n}")
    return Attempted(gate=gate, judged=judged, watcher=watcher)


def _stop_if_cancelled(run: InteractionRun, n: int, count: Count) -> None:
    """`InteractionCancelled` when attempt `n`'s generation was cancelled or its streaming client
    left: nothing of it is kept."""
    if run.cancel is not None and run.cancel.stops_generation():
        count("generation_cancelled", 1)
        raise InteractionCancelled(f"inference.{n}", run.cancel.by or "game")
    if run.stream is not None and run.stream.cancelled:
        count("stream_cancelled", 1)
        raise InteractionCancelled(f"inference.{n}")


def _record(
    n: int,
    prompt: Prompt,
    generation: Generation,
    parse: ParseResult,
    judged: GateResult,
    watcher: IncrementalGate | None,
    bound: int | None,
) -> AttemptRecord:
    """The attempt as the receipt and the audit record keep it."""
    return AttemptRecord(
        attempt=n,
        prompt_hash=prompt.prompt_hash(),
        raw_output=generation.text,
        output_hash=sha256_hex(generation.text),
        parse_path=parse.path,
        gates=judged.checks,
        failures=judged.failures,
        findings=judged.findings,
        tokens_evaluated=generation.tokens_evaluated,
        tokens_cached=generation.tokens_cached,
        tokens_generated=generation.tokens_generated,
        stream=watcher.record(generation.finish_reason == "aborted") if watcher is not None else None,
        judge=judged.judge,
        prevented=generation.prevented,
        dialogue_chars=bound,
    )


def _gave_up(run: InteractionRun, prompt: Prompt, n: int, exc: BackendError, *, cut: bool, count: Count) -> GiveUp:
    """No output from attempt `n`: the deadline `cut` its generation (`time_budget`; the record
    keeps nothing of the attempt, as its replay, whose time decisions stop before it, never asks
    for it), or the backend failed (`backend`, with the prompt's manifest and why)."""
    if cut:
        count("deadline_cut", 1)
        return GiveUp("time_budget")
    if n == 1:
        run.manifest, run.context_keys = prompt.manifest, prompt.context_keys
    run.backend_failure = backend_failure(exc)
    return GiveUp(f"backend: {exc}")


def backend_failure(exc: BackendError) -> str:
    """`Receipt.backend_failure` for what the backend raised."""
    if isinstance(exc, BackendUnavailable):
        return "busy" if isinstance(exc, BackendBusy) else "unreachable"
    return "timeout" if isinstance(exc, BackendTimeout) else "error"


def _incremental_gate(
    run: InteractionRun,
    snapshot: StateSnapshot,
    carry: StreamCarry,
    config: PipelineConfig,
    judged_by_model: bool,
    special_tokens: tuple[str, ...],
    cut_at: int,
) -> IncrementalGate | None:
    """The streamed attempt's incremental gate; None when the interaction does not stream."""
    if run.stream is None:
        return None
    return IncrementalGate(
        session=run.stream,
        snapshot=snapshot,
        config=config.gate,
        hygiene=run.view.profile.output_hygiene,
        streaming=config.streaming,
        hold_all=judged_by_model,  # the judge sees only whole outputs: nothing is released early
        special_tokens=special_tokens,
        cut_at=cut_at,
        continued=len(carry.continued),
        avoided=carry.avoid,
        safe=carry.released,
    )


def _decided(whole: GateResult | None, watcher: IncrementalGate | None) -> tuple[GateResult, GateResult]:
    """What decides the attempt, and what the gate found: the whole output's result or, streamed,
    what the incremental gate makes of it (the last accepted cut when a sentence failed)."""
    if watcher is None:
        if whole is None:
            raise AssertionError("an attempt without streaming is always validated whole")
        return whole, whole
    judged = whole if whole is not None else watcher.failed
    gate = watcher.finish(whole) or watcher.failed
    if gate is None or judged is None:
        raise AssertionError("a streamed attempt ends with a gate result")
    return gate, judged


def _generate(
    backend: InferenceBackend, request: GenerationRequest, watcher: IncrementalGate | None, cancel: Cancellation | None
) -> Generation:
    """The backend's output; a backend failure after words were released ends the generation
    where it stood (the reply is what was released, the cut says why it stopped). A cancel cuts
    the generation at its next token where the backend stops on its observer's word."""
    observe: Observer | None = watcher.observe if watcher is not None else None
    if cancel is not None and (observe is not None or backend.stops_when_told):
        observe = _until_cancelled(cancel, observe)
    try:
        if observe is None:
            return backend.generate(request)
        return backend.generate_streaming(request, observe)
    except BackendError as exc:
        if watcher is None or watcher.safe is None:
            raise
        watcher.backend_failed(str(exc))
        return Generation(text=watcher.last_raw, finish_reason="aborted")


def _until_cancelled(cancel: Cancellation, observe: Observer | None) -> Observer:
    """`observe` (the incremental gate, or nothing), stopping the generation once cancelled."""
    return lambda text: not cancel.stops_generation() and (observe is None or observe(text))


@dataclass(frozen=True)
class Accept:
    """The interaction's answer: `gate` (with its soft failures as warnings)."""

    gate: GateResult


@dataclass(frozen=True)
class GiveUp:
    """No answer from the model: the fallback, for `reason`."""

    reason: str


@dataclass(frozen=True)
class Retry:
    """Another attempt, with rules escalated for `failures` and a repair naming them."""

    failures: tuple[GateFailure, ...]
    carry: StreamCarry
    #: The retry goes on from the words a cut attempt released.
    continues: bool = False


Step = Accept | GiveUp | Retry


def next_step(attempted: Attempted, snapshot: StateSnapshot, carry: StreamCarry, *, released: str, steers: bool) -> Step:
    """What follows an attempt. `released`: the stream's words out so far; `steers`: whether a
    streamed retry may be given its output's start (`StreamingConfig.continue_after_cut` and a
    backend that `continues_output`)."""
    gate, judged, watcher = attempted.gate, attempted.judged, attempted.watcher
    continues = False
    if watcher is not None and watcher.cut is not None and gate is watcher.safe:
        # Cut after words were released: go on from them, or end the reply there.
        if not _continues_after_cut(snapshot, judged, watcher, steers=steers):
            return Accept(gate)
        carry = StreamCarry(released=watcher.safe, continued=released, avoid=carry.avoid)
        failures, continues = judged.failures, True
    else:
        if gate.accepted:
            return Accept(gate)  # soft rules bend on the last attempt, with a warning
        if gate.critical:
            return GiveUp("critical: " + "; ".join(f.reason for f in gate.failures if f.severity is Severity.CRITICAL))
        if not snapshot.can_retry:
            return GiveUp("attempts_exhausted")
        failures = gate.failures
    # A streamed retry may not begin with the sentence that cut the last attempt, when that
    # sentence began where the retry begins (after the words it continues, if any).
    steer = watcher is not None and steers and watcher.failed_from == len(carry.continued)
    avoid = watcher.failed_sentence if steer and watcher is not None else ""
    if not avoid and steers and not continues:
        # Nor may a retry begin as a reply rejected for copying (itself, the player, an example):
        # a small model told so in words writes the same line again; refused its first token, not.
        avoid = _copied_opening(gate)
    return Retry(failures, replace(carry, avoid=avoid), continues)


def keeps_decline(attempts: list[AttemptRecord], failures: tuple[GateFailure, ...], snapshot: StateSnapshot) -> bool:
    """Whether a retry may grant no intent: every attempt so far declined (wrote `intent`
    "none", and no intent among its mutations) and the gate refused something else than the
    decline itself (a reply that says the act is done without granting it, a rule that requires
    an intent). Retried for a style fault, the 1.5B's guard turned "I'm sorry, traveller. But
    the captain said he can't let you pass tonight." into "You're welcome, traveller. Let's get
    to it." with the gate open: a retry keeps what the earlier attempts decided."""
    if not attempts or not snapshot.offered_intents:
        return False
    requiring = {c.rule_id for c in snapshot.constraints.constraints if c.checks.required_intents}
    if any(f.rule_id == GRANTS_IN_WORDS_ONLY_RULE or f.rule_id in requiring for f in failures):
        return False
    return all(_declined(a.raw_output) for a in attempts)


def _declined(raw: str) -> bool:
    """Whether an output parsed and granted nothing."""
    data = parse_output(raw).data
    if data is None:
        return False
    mutations = data.get("mutations")
    emits = isinstance(mutations, list) and any(isinstance(m, dict) and m.get("kind") == "emit_world_intent" for m in mutations)
    return data.get("intent", NO_INTENT) == NO_INTENT and not emits


#: Failures of a reply that copied something: its retry may not begin the same way.
_COPYING_RULES = frozenset({REPEATS_ITSELF_RULE, PARROTING_RULE})


def _copied_opening(gate: GateResult) -> str:
    """The first sentence of a reply rejected for copying, or "" for any other rejection."""
    if gate.output is None or not any(f.rule_id in _COPYING_RULES for f in gate.failures):
        return ""
    dialogue = gate.output.dialogue
    ends = chunk_ends(dialogue, closed=True)
    return dialogue[: ends[0]] if ends else dialogue


def _continues_after_cut(snapshot: StateSnapshot, judged: GateResult, watcher: IncrementalGate, *, steers: bool) -> bool:
    """Whether a streamed attempt cut after releasing words is followed by an attempt that
    continues them: only for a failure a repair can name, with attempts left, and a backend
    that can continue an output."""
    return steers and snapshot.can_retry and not watcher.backend_error and bool(judged.failures) and not judged.critical
