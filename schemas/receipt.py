"""What one interaction produced and why: gate outcomes, attempts and the receipt.

Everything here except `PhaseTiming` values and `*_ms` fields is deterministic: timings are
metadata and never enter a hash.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from loreguard.schemas.base import FrozenModel, Identifier, JsonScalar
from loreguard.schemas.output import Emotion, ProposedMutation, WorldIntent
from loreguard.schemas.prevention import Prevention
from loreguard.schemas.rules import Severity


class GateName(str, Enum):
    """The gates in the order they run. Hard limits always run first."""

    HARD_LIMITS = "hard_limits"
    SCHEMA = "schema"
    CONSTRAINTS = "constraints"
    CANONICAL = "canonical"
    #: Numbers in the line against the values the prompt carried (prices, counts).
    GROUNDING = "grounding"
    KNOWLEDGE = "knowledge"
    MUTATIONS = "mutations"
    SEMANTIC = "semantic"


class GateFailure(FrozenModel):
    gate: GateName
    reason: str
    severity: Severity
    #: The rule that failed: a designer rule's id, a canonical fact's or secret's id, what a
    #: number was about, or one of the gate's built-in checks (`max_raw_chars`, `prompt_markup`,
    #: `output_schema`, `ungrounded_numbers`). The gate sets it on every failure; None only in
    #: records written before it did.
    rule_id: str | None = None
    #: The exact text that triggered the failure, when there is one (used for repair prompts).
    evidence: str | None = None


class GateCheck(FrozenModel):
    gate: GateName
    passed: bool
    failures: int = 0
    #: Why the gate did not run for this attempt (e.g. the semantic judge after a hard rule
    #: already failed: the repair names that rule); None when it ran.
    skipped: str | None = None
    #: How the gate decided, where that is worth saying: the semantic judge's model gave no
    #: verdict (a timeout, an answer out of grammar) and the deterministic checks decided.
    note: str | None = None


class RejectedMutation(FrozenModel):
    mutation: ProposedMutation
    reason: str
    #: True when the mutation tried to change a canonical fact.
    canonical_override: bool = False


class FindingKind(str, Enum):
    """Something in a reply's dialogue that is not the NPC speaking (see `OutputHygiene`)."""

    #: Bracket markup: `[MEMORY: ...]`, `[INTENT: ...]`, `<|im_end|>`, `{...}`.
    INLINE_MARKER = "inline_marker"
    #: The speaker's name before the line: `Brom: ...`.
    SPEAKER_LABEL = "speaker_label"
    #: An action instead of speech: `*smiles*`, `(laughs)`, `[sighs]`.
    STAGE_DIRECTION = "stage_direction"
    #: Asterisk emphasis around one word (`I *told* you`): the word stays, the asterisks go.
    EMPHASIS = "emphasis"
    #: The model speaking about itself or the text: `As an AI...`, `Note: ...`.
    META_TEXT = "meta_text"
    #: A trailing piece of a sentence (`..., and the`), as when generation is cut short.
    SENTENCE_FRAGMENT = "sentence_fragment"
    #: A sentence in a helpful assistant's register beside the NPC's own (`Do you have any other
    #: questions?`): stripped; a line of nothing else fails `assistant_register`.
    ASSISTANT_REGISTER = "assistant_register"
    #: A sentence the NPC said before to another question, beside new ones (`Stay in the shadows
    #: until then.` again): stripped; a line that is all repeat fails `repeats_itself`.
    REPEATED_SENTENCE = "repeated_sentence"


class FindingAction(str, Enum):
    #: Removed from the dialogue; the rest is spoken.
    STRIPPED = "stripped"
    #: Removed, and the feeling it named became the reply's emotion (the model left it neutral).
    MAPPED = "mapped"
    #: A hard failure of the attempt (hard limits), so it is retried.
    REJECTED = "rejected"


class OutputFinding(FrozenModel):
    """One thing output hygiene found in a reply's dialogue, and what it did with it."""

    kind: FindingKind
    #: The exact text found.
    text: str
    action: FindingAction
    #: With action `mapped`: the emotion the reply took from it.
    emotion: Emotion | None = None


class SkippedFallback(FrozenModel):
    """An authored fallback line that was not spoken because it would break a rule active in
    this interaction (checked with the gate's own constraint and knowledge checks)."""

    #: Where the line is authored: `npc.fallbacks.by_trigger.player_utterance.0`,
    #: `world.fallbacks.generic.1`, `world.emergency_fallback`. Never the line's text (it may
    #: hold what it was skipped for).
    line: str
    failures: tuple[GateFailure, ...]


class ParsePath(str, Enum):
    STRICT = "strict"
    TOLERANT = "tolerant"
    FAILED = "failed"


class StreamRelease(FrozenModel):
    """One chunk a streamed attempt released: its place in the spoken dialogue."""

    seq: int = Field(ge=0)
    #: Character offsets of the chunk in the interaction's dialogue.
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    #: When it was released, from the interaction's start. Metadata: replay does not compare it.
    released_ms: float = 0.0


class StreamCut(FrozenModel):
    """Where a streamed attempt was cut and why."""

    #: Characters of the model's dialogue written when the cut was decided.
    at_char: int = Field(ge=0)
    #: Characters released before the cut (the reply, when more than 0).
    released_chars: int = Field(ge=0)
    reason: str
    failures: tuple[GateFailure, ...] = ()


class AttemptStream(FrozenModel):
    """How a streamed attempt was released (see `loreguard.server.pipeline.running.streaming`)."""

    releases: tuple[StreamRelease, ...] = ()
    cut: StreamCut | None = None
    #: The generation was stopped before the model finished (a failed sentence, or the client left).
    aborted: bool = False
    #: Characters of released dialogue the attempt continued: its output was given to start
    #: with them (a retry after a cut keeps the words the player saw). 0: it started afresh.
    continued_chars: int = Field(default=0, ge=0)
    #: The sentence the attempt was told not to begin with (after the words it continued): the
    #: one that cut the previous attempt. "": none.
    avoided_start: str = ""


class JudgeRecord(FrozenModel):
    """What the semantic judge's model answered for one attempt (`server/pipeline/running/judge.py`):
    its verdict, or why there is none, and what it cost."""

    #: `verdict`: an answer in the verdict's grammar. `timeout`, `unparsable` (out of grammar) or
    #: `unavailable` (the backend failed): no verdict, and the deterministic checks decided.
    outcome: Literal["verdict", "timeout", "unparsable", "unavailable"]
    #: The model's answer as written ("" without one).
    raw: str = ""
    #: The ids the verdict names as broken (`canonical:ID`, `secret:ID`, a rule's id).
    broken: tuple[str, ...] = ()
    #: Prompt tokens the judge evaluated: in the NPC's own sequence, only the judge's question.
    tokens_evaluated: int = 0
    #: Prompt tokens it found in the cache: the NPC's prompt and the reply.
    tokens_cached: int = 0
    tokens_generated: int = 0
    #: Metadata, never compared by a replay.
    total_ms: float = 0.0


class AttemptRecord(FrozenModel):
    attempt: int
    prompt_hash: str
    raw_output: str
    output_hash: str
    parse_path: ParsePath
    gates: tuple[GateCheck, ...]
    failures: tuple[GateFailure, ...]
    #: What output hygiene found in the dialogue (markup, labels, stage directions, meta-text,
    #: fragments) and whether it was stripped or rejected.
    findings: tuple[OutputFinding, ...] = ()
    tokens_evaluated: int = 0
    #: Prompt tokens the model found in its cache (the in-process engine's, or what a remote
    #: server reports in `usage`), not evaluated again. Metadata, like `tokens_evaluated`.
    tokens_cached: int = 0
    tokens_generated: int = 0
    #: Set when the interaction was streamed: chunk boundaries, release times, the cut.
    stream: AttemptStream | None = None
    #: Set when the semantic judge's model was asked about this attempt.
    judge: JudgeRecord | None = None
    #: What the sampler kept out of the dialogue while it was written, and why (the gate rule
    #: each would have failed): see `loreguard.schemas.prevention`.
    prevented: tuple[Prevention, ...] = ()
    #: The dialogue's length bound when the time left made it shorter than the profile's, so a
    #: second attempt could still follow a refused first (`running.pacing`); None: not bounded.
    dialogue_chars: int | None = None
    #: The reply was cut back to the first this many characters of the model's dialogue, the
    #: sentences before the ones the gate refused, and the cut was the answer without another
    #: generation (`running.repair`); None: not cut.
    cut_to: int | None = None

    @property
    def kv_hit_rate(self) -> float | None:
        """The share of the prompt's tokens found in the model's cache; None when the backend
        reported no prompt tokens."""
        total = self.tokens_evaluated + self.tokens_cached
        return round(self.tokens_cached / total, 3) if total else None


class DealRecord(FrozenModel):
    """A request the rules decided (`IntentSpec.decided_by`): what was asked, the outcome, and
    why. The model only voiced it: a sale's intent is the one the output could grant, a
    decline's output could grant none."""

    #: The request as the player's line put it (type and parameters).
    intent: WorldIntent
    granted: bool
    #: Why, as the prompt told the model: "sells 1 rope for 2 silver", "the player has 1
    #: silver, and 1 rope costs 2 silver".
    reason: str
    decided_by: Literal["rules"] = "rules"


class InteractionOutcome(str, Enum):
    VALIDATED = "validated"
    FALLBACK = "fallback"
    CLARIFY = "clarify"
    #: An invariant broke: nothing was applied. Only audit records carry it; the game gets an
    #: `internal` error whose details say so (`cause: invariant_halt`).
    HALTED = "halted"
    #: Cancelled before it committed (`interact.cancel`, the scene ended, the streaming client
    #: left): nothing was applied. Only audit records carry it; the game gets a `cancelled`
    #: error.
    CANCELLED = "cancelled"


#: Who cancelled an interaction (`CancelRecord.by`).
CancelledBy = Literal["game", "scene_end", "client_left"]


class CancelRecord(FrozenModel):
    """Who cancelled an interaction, where it stood, and after how long (`Receipt.cancelled`)."""

    #: `game`: an `interact.cancel`; `scene_end`: the scene ended under its line; `client_left`:
    #: the streaming client disconnected.
    by: CancelledBy
    #: Where the pipeline stopped: `inference.N` (before or during attempt N's generation,
    #: nothing of which is kept) or `commit` (a reply was ready and was not applied).
    phase: str
    #: From the interaction's start to its stop (metadata, like every `*_ms`).
    after_ms: float = 0.0


class PhaseTiming(FrozenModel):
    phase: str
    duration_us: int


class Receipt(FrozenModel):
    """One per interaction: what the sidecar decided, at every phase, and the hashes that
    make it replayable."""

    npc_id: Identifier
    interaction_index: int
    seed: int
    #: The sampler settings the model ran with besides the seed (repetition penalties, DRY;
    #: see `LlamaCppConfig`); empty for a backend without a sampler of its own.
    sampling: dict[str, JsonScalar] = Field(default_factory=dict)
    task_type: str
    manifest: str
    context_keys: tuple[str, ...]
    constraints: tuple[str, ...]
    sufficiency: str
    #: What the sufficiency check found missing (`world_state:KEY`, `world_state:PREFIX*`),
    #: before any value was derived for it.
    missing: tuple[str, ...] = ()
    #: Values derived for missing keys from the world's `state_defaults` (sufficiency `retry`).
    derived: dict[str, JsonScalar] = Field(default_factory=dict)
    #: World-state keys whose value had the wrong type for a rule comparing them.
    mistyped: tuple[str, ...] = ()
    #: With outcome `clarify`: the rules (by id) that could not be evaluated for want of those keys.
    unevaluable_rules: tuple[str, ...] = ()
    attempts: tuple[AttemptRecord, ...]
    outcome: InteractionOutcome
    fallback_used: bool
    fallback_reason: str | None = None
    #: Why the model gave no reply, when the fallback stands in for one: `unreachable` (the
    #: model server is down or its circuit is open: a game may say so, docs/remote-engines.md),
    #: `busy` (it asked to wait longer than the deadline), `timeout`, or `error` (anything else,
    #: in `fallback_reason`). None: the model answered.
    backend_failure: Literal["unreachable", "busy", "timeout", "error"] | None = None
    #: Fallback lines passed over before the one spoken, each with the rules it would break.
    skipped_fallbacks: tuple[SkippedFallback, ...] = ()
    #: With outcome `halted`: the phase and the invariant that broke, and what was refused.
    halt_reason: str | None = None
    memory_hash_before: str
    memory_hash_after: str
    snapshot_hash: str
    constraints_hash: str
    applied_mutations: tuple[ProposedMutation, ...] = ()
    rejected_mutations: tuple[RejectedMutation, ...] = ()
    canonical_override_attempts: int = 0
    warnings: tuple[GateFailure, ...] = ()
    #: The requests the rules decided this interaction, in the order they were asked.
    deals: tuple[DealRecord, ...] = ()
    #: With outcome `cancelled`: who cancelled it and where it stood.
    cancelled: CancelRecord | None = None
    #: Metadata, excluded from every hash.
    timings: tuple[PhaseTiming, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_extras(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A receipt without deals or a cancel reads as it did before them: records made then
        # hash the same.
        data: dict[str, Any] = handler(self)
        if not data.get("deals"):
            data.pop("deals", None)
        if data.get("cancelled") is None:
            data.pop("cancelled", None)
        return data

    @property
    def kv_hit_rate(self) -> float | None:
        """The share of all attempts' prompt tokens found in the model's cache (the in-process
        engine's, or a remote server's as its `usage` reports them); None without attempts or
        counts."""
        cached = sum(a.tokens_cached for a in self.attempts)
        total = cached + sum(a.tokens_evaluated for a in self.attempts)
        return round(cached / total, 3) if total else None


class InteractionResult(FrozenModel):
    """The `interact.ok` body: what the game shows and does."""

    npc_id: Identifier
    outcome: InteractionOutcome
    dialogue: str
    emotion: Emotion = Emotion.NEUTRAL
    intents: tuple[WorldIntent, ...] = ()
    attempts: int
    fallback_used: bool
    #: With outcome `clarify`: the world-state keys (or other context) the game must provide.
    needs: tuple[str, ...] = ()
    failed_gates: tuple[str, ...] = ()
    receipt: Receipt
    audit_record_id: str | None = None


class ModelFingerprint(FrozenModel):
    """Which model answered, in `hello` and every receipt. For the in-process llama.cpp backend
    `extra` also says where it runs: `device` (`cpu`, `vulkan:0`, `cuda:0`), `device_name`
    (the driver's name for it), `offloaded_layers` and `engine` (docs/gpu.md)."""

    backend: str
    file_name: str = ""
    size_bytes: int = Field(default=0, ge=0)
    header_sha256: str = ""
    quantization: str = ""
    n_ctx: int = 0
    extra: dict[str, JsonScalar] = Field(default_factory=dict)
