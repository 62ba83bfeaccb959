"""Replay recorded interactions through the current code and report where behaviour drifted.

Each record is replayed on its own: a scratch in-memory store is put back exactly where the
record started (its memory image, profile, world and config), the recorded context goes in,
and the new audit record is compared with the recorded one. A drift in one record therefore
never hides or causes drift in another.

- Governance replay feeds the recorded raw outputs back as the model: prompts, constraints,
  validation and memory must come out byte for byte. This catches code and rule regressions.
- Live replay runs a real model with the recorded seeds: output drift shows what the model
  (or its build, or its settings) now says differently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.memory.entries import build_scope
from loreguard.schemas.audit import AuditRecord, DebugPackage
from loreguard.schemas.memory import MemoryKind, ScopeMemory
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.receipt import AttemptRecord, ModelFingerprint
from loreguard.server.audit.manifests import entry_rows
from loreguard.server.audit.recorder import AuditRecorder
from loreguard.server.inference import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    Generation,
    GenerationRequest,
    InferenceBackend,
)
from loreguard.server.inference.base import Observer
from loreguard.server.pipeline import summaries
from loreguard.server.pipeline.errors import InteractionCancelled, LifecycleHalt
from loreguard.server.pipeline.lifecycle import GovernancePipeline
from loreguard.server.pipeline.running.cancel import RecordedCancel
from loreguard.server.pipeline.running.config import PipelineConfig
from loreguard.server.pipeline.running.run_state import InteractionRun
from loreguard.server.pipeline.running.streaming import StreamSession


class DriftKind(str, Enum):
    NONE = "none"
    CONSTRAINTS = "constraints"
    PROMPT = "prompt"
    OUTPUT = "output"
    VALIDATION = "validation"
    MEMORY = "memory"
    FAILURE = "failure"


#: Pipeline order: a record's primary drift is the earliest stage that differs.
_ORDER = (DriftKind.FAILURE, DriftKind.CONSTRAINTS, DriftKind.PROMPT, DriftKind.OUTPUT, DriftKind.VALIDATION, DriftKind.MEMORY)


class ReplayMode(str, Enum):
    GOVERNANCE = "governance"
    LIVE = "live"


@dataclass(frozen=True)
class RecordReplay:
    """One record, replayed."""

    recorded: AuditRecord
    replayed: AuditRecord | None
    kinds: tuple[DriftKind, ...] = ()
    #: One line per difference, or the failure.
    details: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return not self.kinds

    @property
    def kind(self) -> DriftKind:
        return self.kinds[0] if self.kinds else DriftKind.NONE


@dataclass
class ReplayReport:
    mode: ReplayMode
    recorded_model: ModelFingerprint | None
    current_model: ModelFingerprint | None
    #: Records in the package (more than `results` when replay stopped early).
    total: int = 0
    results: list[RecordReplay] = field(default_factory=list)

    @property
    def stopped_early(self) -> bool:
        return len(self.results) < self.total

    @property
    def model_matches(self) -> bool:
        return _same_model(self.recorded_model, self.current_model)

    @property
    def exact_matches(self) -> int:
        return sum(1 for r in self.results if r.exact)

    @property
    def drifts(self) -> int:
        return len(self.results) - self.exact_matches

    @property
    def first_drift(self) -> RecordReplay | None:
        return next((r for r in self.results if not r.exact), None)


class RecordedTimeDecisions:
    """The time decisions of a replay, taken from the record (`TimeDecisions`): an interaction
    that ran out of time did so after the attempts it recorded, however fast the replay runs."""

    def __init__(self, record: AuditRecord) -> None:
        reason = record.receipt.fallback_reason or ""
        self._recorded_attempts = len(record.receipt.attempts)
        self._bounds = [a.dialogue_chars for a in record.receipt.attempts]
        self._out_of_time_at = self._recorded_attempts + 1 if reason.startswith("time_budget") else None

    def over_time_budget(self, run: InteractionRun, attempt: int) -> bool:
        return self._out_of_time_at is not None and attempt >= self._out_of_time_at

    def out_of_time_after_release(self, run: InteractionRun, attempt: int) -> bool:
        # Words were out and a retry could go on from them: the recorded interaction made no
        # further attempt only because its time or deadline ran out then.
        return attempt > self._recorded_attempts

    def generation_timeout_ms(self, run: InteractionRun) -> int | None:
        # The recorded outputs answer at once; a generation the deadline cut has no attempt in
        # the record, and `over_time_budget` stops the replay before it.
        return None

    def dialogue_chars(self, run: InteractionRun, attempt: int, limit: int) -> int:
        recorded = self._bounds[attempt - 1] if attempt <= len(self._bounds) else None
        return recorded if recorded is not None else limit

    def observe(self, generation: Generation) -> None:
        """A replay's speed decides nothing: its bounds come from the record (`dialogue_chars`)."""


#: How a stream's cut reason begins when the backend failed mid-generation (`IncrementalGate.backend_failed`).
_BACKEND_CUT = "backend: "


class RecordedOutputs(InferenceBackend):
    """The model of a governance replay: the record's raw outputs, attempt by attempt."""

    name = "replay"

    def __init__(self, record: AuditRecord) -> None:
        self._record = record
        self._next = 0

    @property
    def continues_output(self) -> bool:
        # As the recorded backend did: a streamed retry went on from released words, or was kept
        # from beginning with the rejected sentence, only where it could (the recorded outputs
        # hold the words they were given to start with).
        return any(
            a.stream is not None and (a.stream.continued_chars or a.stream.avoided_start) for a in self._record.receipt.attempts
        )

    def generate(self, request: GenerationRequest) -> Generation:
        attempts = self._record.receipt.attempts
        if request.purpose == "judge":
            return self._judged(attempts[self._next - 1] if self._next else None)
        if self._next >= len(attempts):
            raise BackendError(f"the record has no model output for attempt {self._next + 1} (it made {len(attempts)})")
        attempt = attempts[self._next]
        self._next += 1
        aborted = attempt.stream is not None and attempt.stream.aborted
        return Generation(
            text=attempt.raw_output,
            tokens_generated=attempt.tokens_generated,
            finish_reason="aborted" if aborted else "stop",
            prevented=attempt.prevented,  # what the sampler kept out while the output was written
        )

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        """The recorded output shown at once; a streamed attempt the backend broke off after words
        were released (a deadline's cut, a dropped connection) breaks off here too, for the same
        recorded reason, so the incremental gate ends it the same way."""
        generation = self.generate(request)
        observe(generation.text)
        attempt = self._record.receipt.attempts[self._next - 1] if request.purpose == "dialogue" else None
        cut = attempt.stream.cut if attempt is not None and attempt.stream is not None else None
        if cut is not None and cut.reason.startswith(_BACKEND_CUT):
            raise BackendError(cut.reason.removeprefix(_BACKEND_CUT))
        return generation

    @staticmethod
    def _judged(attempt: AttemptRecord | None) -> Generation:
        """The judge's answer about `attempt` as recorded, or the failure it met."""
        judge = attempt.judge if attempt is not None else None
        if judge is None or judge.outcome == "unavailable":
            raise BackendUnavailable("the record has no judge's answer for this attempt")
        if judge.outcome == "timeout":
            raise BackendTimeout("the judge's model timed out when this was recorded")
        return Generation(text=judge.raw, tokens_generated=judge.tokens_generated)

    def sampling(self) -> dict[str, float | int]:
        # The recorded model's sampler settings (numbers, as a backend reports them): the replay
        # stands in for that model.
        return {key: value for key, value in self._record.receipt.sampling.items() if isinstance(value, int | float)}

    def fingerprint(self) -> ModelFingerprint:
        return self._record.model or ModelFingerprint(backend="replay")


class Replayer:
    """Replays a package's records. `profiles` and `world` replace the recorded definitions
    (how a designer checks a rule change against a recorded session)."""

    def __init__(
        self,
        package: DebugPackage,
        *,
        live_backend: InferenceBackend | None = None,
        profiles: Mapping[str, NpcProfile] | None = None,
        world: WorldDefinition | None = None,
    ) -> None:
        self.package = package
        self.live_backend = live_backend
        self.profiles = dict(profiles or {})
        self.world = world

    @property
    def mode(self) -> ReplayMode:
        return ReplayMode.LIVE if self.live_backend is not None else ReplayMode.GOVERNANCE

    def steps(self, *, stop_on_drift: bool = False) -> Iterator[RecordReplay]:
        """Replay record by record (step mode consumes this one item at a time)."""
        for record in self.package.records:
            result = self.replay_record(record)
            yield result
            if stop_on_drift and not result.exact:
                return

    def new_report(self) -> ReplayReport:
        """An empty report for this package and mode; `run` (or a stepping caller) fills it."""
        return ReplayReport(
            mode=self.mode,
            recorded_model=self.package.model,
            current_model=self.live_backend.fingerprint() if self.live_backend is not None else self.package.model,
            total=len(self.package.records),
        )

    def run(self, *, stop_on_drift: bool = False) -> ReplayReport:
        report = self.new_report()
        report.results.extend(self.steps(stop_on_drift=stop_on_drift))
        return report

    def replay_record(self, record: AuditRecord) -> RecordReplay:
        try:
            replayed = self._run(record)
        except Exception as exc:
            return RecordReplay(record, None, (DriftKind.FAILURE,), (f"{type(exc).__name__}: {exc}",))
        kinds, details = compare(record, replayed, live=self.live_backend is not None)
        return RecordReplay(record, replayed, kinds, details)

    def _run(self, record: AuditRecord) -> AuditRecord:
        blobs = self.package.blobs
        config: dict[str, Any] = blobs[record.config]
        store = MemoryStore(":memory:", policy=MemoryPolicy.model_validate(config["memory_policy"]))
        try:
            image = record.before
            profile = self.profiles.get(record.npc_id) or NpcProfile.model_validate(blobs[image.profile])
            world = self.world or (WorldDefinition.model_validate(blobs[image.world]) if image.world else None)
            restored = store.replace_all(
                scopes=[_scope(blobs, digest) for _, digest in image.scopes],
                profiles={record.npc_id: profile},
                world=world,
                interactions={record.npc_id: image.interactions},
                last_fallback={record.npc_id: image.last_fallback},
                behaviour=image.behaviour,
                next_seq=image.next_seq,
            )
            if restored != record.receipt.memory_hash_before:
                raise ValueError("the package's memory image does not hash to the record's memory_hash_before")
            backend = self.live_backend or RecordedOutputs(record)
            recorder = AuditRecorder(store, fingerprint=backend.fingerprint(), ring_size=1)
            pipeline = GovernancePipeline(
                store,
                backend,
                PipelineConfig.model_validate(config["pipeline"]),
                recorder=recorder,
                time_decisions=RecordedTimeDecisions(record),
                # the judge's model answers from the record too, where it was asked
                judge_backend=backend if any(a.judge is not None for a in record.receipt.attempts) else None,
            )
            # A streamed interaction replays streamed: where a reply was cut is a decision too.
            streamed = any(a.stream is not None for a in record.receipt.attempts)
            stream = StreamSession(emit=lambda chunk: None) if streamed else None
            # A cancelled interaction stops where it was cancelled.
            cancelled = record.receipt.cancelled
            cancel = RecordedCancel(cancelled) if cancelled is not None else None
            with suppress(LifecycleHalt, InteractionCancelled):  # its record, like any other, is what is compared
                if record.receipt.task_type == summaries.TASK:
                    pipeline.consolidate(record.npc_id)  # a summary the model wrote in idle time
                else:
                    pipeline.interact(record.context, stream=stream, cancel=cancel)
            return recorder.tail(limit=1)[0]
        finally:
            store.close()


def _scope(blobs: Mapping[str, Any], digest: str) -> ScopeMemory:
    manifest = blobs[digest]
    rows = entry_rows(manifest, blobs)
    return build_scope(manifest["scope"], ((MemoryKind(kind), blobs[entry]) for kind, _, entry in rows))


def _groups(record: AuditRecord, *, live: bool) -> dict[DriftKind, object]:
    """What each drift kind compares. Inputs (context, memory image, config) are not compared:
    they are what the replay starts from."""
    r = record.receipt
    groups: dict[DriftKind, object] = {
        DriftKind.CONSTRAINTS: (r.constraints, r.constraints_hash),
        DriftKind.PROMPT: (
            record.prompts,
            [a.prompt_hash for a in r.attempts],
            r.snapshot_hash,
            r.manifest,
            r.context_keys,
            r.task_type,
            r.sufficiency,
            r.interaction_index,
            r.seed,
        ),
        DriftKind.OUTPUT: [(a.raw_output, a.output_hash, a.tokens_generated) for a in r.attempts],
        DriftKind.VALIDATION: (
            r.outcome,
            [(a.attempt, a.parse_path, a.gates, a.failures, _stream_decisions(a), _judge_decision(a)) for a in r.attempts],
            record.dialogue,
            record.emotion,
            record.intents,
            record.needs,
            r.fallback_used,
            r.fallback_reason,
            r.halt_reason,
            (r.cancelled.by, r.cancelled.phase) if r.cancelled is not None else None,
            r.warnings,
            r.rejected_mutations,
            r.canonical_override_attempts,
        ),
        DriftKind.MEMORY: (r.memory_hash_after, r.applied_mutations),
    }
    if not live:
        # In a governance replay the outputs are the recorded ones by construction; a change in
        # how many attempts were made is validation drift, not output drift.
        del groups[DriftKind.OUTPUT]
    return groups


def _judge_decision(attempt: AttemptRecord) -> object:
    """What the judge's model answered about an attempt, without its cost."""
    judge = attempt.judge
    return None if judge is None else (judge.outcome, judge.raw, judge.broken)


def _stream_decisions(attempt: AttemptRecord) -> object:
    """What streaming decided in an attempt (chunk boundaries, the cut), without the times."""
    if attempt.stream is None:
        return None
    releases = [(r.seq, r.start, r.end) for r in attempt.stream.releases]
    return (releases, attempt.stream.cut, attempt.stream.aborted)


def compare(recorded: AuditRecord, replayed: AuditRecord, *, live: bool = False) -> tuple[tuple[DriftKind, ...], tuple[str, ...]]:
    """The drift kinds (in pipeline order) and one line per difference."""
    before, after = _groups(recorded, live=live), _groups(replayed, live=live)
    kinds = [kind for kind in _ORDER if kind in before and before[kind] != after[kind]]
    details = [_describe(kind, recorded, replayed) for kind in kinds]
    if not kinds and _outcome(recorded) != _outcome(replayed):
        kinds, details = [DriftKind.FAILURE], ["the records differ in a field no drift kind covers (a replay bug)"]
    return tuple(kinds), tuple(details)


def _outcome(record: AuditRecord) -> dict[str, Any]:
    fields = record.decision_fields()
    for name in ("context", "before", "config"):
        fields.pop(name)
    return fields


def _describe(kind: DriftKind, recorded: AuditRecord, replayed: AuditRecord) -> str:
    a, b = recorded.receipt, replayed.receipt
    if kind is DriftKind.CONSTRAINTS:
        gone, new = sorted(set(a.constraints) - set(b.constraints)), sorted(set(b.constraints) - set(a.constraints))
        return (
            f"constraints: removed {gone or '-'}, added {new or '-'}, hash {a.constraints_hash[:12]} -> {b.constraints_hash[:12]}"
        )
    if kind is DriftKind.PROMPT:
        changed = [i + 1 for i, (x, y) in enumerate(zip(recorded.prompts, replayed.prompts, strict=False)) if x != y]
        if changed:
            return f"prompt: attempt {', '.join(map(str, changed))} differs"
        if len(recorded.prompts) != len(replayed.prompts):
            return f"prompt: {len(recorded.prompts)} prompts recorded, {len(replayed.prompts)} replayed"
        return f"prompt: same text, snapshot {a.snapshot_hash[:12]} -> {b.snapshot_hash[:12]} (an input definition changed)"
    if kind is DriftKind.OUTPUT:
        changed = [x.attempt for x, y in zip(a.attempts, b.attempts, strict=False) if x.raw_output != y.raw_output]
        return f"output: attempt {', '.join(map(str, changed)) or '-'} differs ({len(a.attempts)} -> {len(b.attempts)} attempts)"
    if kind is DriftKind.VALIDATION:
        return (
            f"validation: {a.outcome.value} after {len(a.attempts)} attempt(s) -> {b.outcome.value} after {len(b.attempts)}; "
            f"failed gates {_failed(recorded)} -> {_failed(replayed)}"
            + (f"; fallback: {b.fallback_reason}" if b.fallback_reason and b.fallback_reason != a.fallback_reason else "")
        )
    return f"memory: {a.memory_hash_after[:12]} -> {b.memory_hash_after[:12]}, {len(a.applied_mutations)} -> {len(b.applied_mutations)} mutations"


def _failed(record: AuditRecord) -> list[str]:
    return [f"{a.attempt}:{check.gate.value}" for a in record.receipt.attempts for check in a.gates if not check.passed]


def _same_model(a: ModelFingerprint | None, b: ModelFingerprint | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.backend, a.file_name, a.size_bytes, a.header_sha256) == (b.backend, b.file_name, b.size_bytes, b.header_sha256)


__all__ = ["DriftKind", "RecordReplay", "RecordedOutputs", "ReplayMode", "ReplayReport", "Replayer", "compare"]
