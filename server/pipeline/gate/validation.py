"""Stage 7b: the validation gate. Hard limits first, then the gates in a fixed order.

1. hard limits: output size, output hygiene (markup, speaker labels, stage directions,
   meta-text, fragments: see `hygiene`; what is rejected fails hard, what is stripped is gone
   before any other gate looks), degenerate output (`degenerate`), the prompt's instructions
   read out (`readout`), parroting (`parroting`), self-repeats (`self_repeats`), the assistant's
   register (`register`), non-answers, other voices, a grant said but not done (`deeds`), and
   every critical constraint; a critical failure stops at once;
2. schema: the parsed JSON must be a valid `ParsedOutput`;
3. constraints: the remaining (soft and hard) constraints;
4. canonical: no claim of a canonical fact may be contradicted, nor the claim of a world-state
   key the prompt carried (the world's `state_claims`, with the key's value now; see
   `loreguard.memory.claims`);
   grounding: no number about a value the prompt carried may differ from it (see `grounding`;
   an amount of money about nothing in the context is a soft failure where the profile flags it);
5. knowledge: no secret may appear in dialogue, mutations or intents (critical);
6. mutations: each proposed mutation is approved or rejected on its own: nothing may write
   the key of a canonical fact (the key it will be stored under, `mutation.stored_key`), values
   stay in range, only the NPC's allowed intents with valid parameters;
7. semantic (optional): the NPC's own model asked about its reply, or the keyword check
   (see `judge`).

Failures accumulate with gate, reason and severity; a critical one stops the run. The gate is a
pure function of (model text, snapshot, config).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError, model_validator

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.npc import OutputHygiene
from loreguard.schemas.output import (
    EmitWorldIntentMutation,
    Emotion,
    ParsedOutput,
    ProposedMutation,
    TransformBeliefMutation,
    WorldIntent,
)
from loreguard.schemas.receipt import (
    GateCheck,
    GateFailure,
    GateName,
    JudgeRecord,
    OutputFinding,
    ParsePath,
    RejectedMutation,
)
from loreguard.schemas.rules import Severity
from loreguard.schemas.text import norm_words
from loreguard.server.pipeline.gate.canonical import claim_failures
from loreguard.server.pipeline.gate.checks import check_constraint, mutation_texts, said_texts, secret_leaks
from loreguard.server.pipeline.gate.deals import deal_failures, declined_problem, payment_of
from loreguard.server.pipeline.gate.deeds import grants_in_words_only
from loreguard.server.pipeline.gate.degenerate import find_degenerate
from loreguard.server.pipeline.gate.hygiene import Scrubbed, scrub_dialogue
from loreguard.server.pipeline.gate.non_answers import non_answer_of
from loreguard.server.pipeline.gate.parroting import CopySources, find_parroting
from loreguard.server.pipeline.gate.readout import find_instructions_read_out
from loreguard.server.pipeline.gate.register import find_assistant_register
from loreguard.server.pipeline.gate.self_repeats import find_self_repeats, repeat_context, without_repeats
from loreguard.server.pipeline.gate.voices import find_other_voices, find_player_voice
from loreguard.server.pipeline.mutation import stored_key
from loreguard.server.pipeline.parsing import ParseResult, parse_output
from loreguard.server.pipeline.prompt import HEADING_WORDS, SCAFFOLDING_MARKERS, scene_situation
from loreguard.server.pipeline.snapshot import StateSnapshot
from loreguard.server.pipeline.turn.intents import grant_problem

#: Rule ids of the gate's built-in checks, so that every failure a receipt lists names the rule
#: that failed (designer rules, canonical facts and secrets name themselves; numbers name what
#: they are about, or `ungrounded_numbers`).
MAX_RAW_CHARS_RULE = "max_raw_chars"
PROMPT_MARKUP_RULE = "prompt_markup"
OUTPUT_SCHEMA_RULE = "output_schema"


class GateConfig(FrozenModel):
    #: Raw model output longer than this is refused outright (critical).
    max_raw_chars: int = 8000
    semantic_judge: bool = False
    #: Keep out of the dialogue, while it is decoded, what the gate's word checks would refuse
    #: (`gate.prevention`), with a backend whose sampler can.
    prevent_in_sampler: bool = True


class GateResult(FrozenModel):
    parse_path: ParsePath
    output: ParsedOutput | None
    checks: tuple[GateCheck, ...]
    failures: tuple[GateFailure, ...]
    #: What output hygiene found in the dialogue, stripped or rejected (see `hygiene`).
    findings: tuple[OutputFinding, ...] = ()
    #: Whether the output may be used: every gate passed, or only soft rules failed on the last
    #: attempt (they bend, and the failures become warnings). Only an accepted result approves
    #: anything: a failed attempt has no approved mutations and no approved intents.
    accepted: bool = False
    approved_mutations: tuple[ProposedMutation, ...] = ()
    rejected_mutations: tuple[RejectedMutation, ...] = ()
    approved_intents: tuple[WorldIntent, ...] = ()
    #: What the semantic judge's model answered about this output; None when none was asked.
    judge: JudgeRecord | None = None

    @model_validator(mode="after")
    def _nothing_approved_unless_accepted(self) -> GateResult:
        if not self.accepted and (self.approved_mutations or self.approved_intents):
            raise ValueError("a gate result that is not accepted approves no mutation and no intent")
        if self.accepted and self.failures and not self.soft_only:
            raise ValueError("a gate result with a hard or critical failure cannot be accepted")
        return self

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def critical(self) -> bool:
        return any(f.severity is Severity.CRITICAL for f in self.failures)

    @property
    def soft_only(self) -> bool:
        return bool(self.failures) and all(f.severity is Severity.SOFT for f in self.failures)

    @property
    def should_retry(self) -> bool:
        return bool(self.failures) and not self.critical

    def failed_gates(self) -> tuple[str, ...]:
        return tuple(check.gate.value for check in self.checks if not check.passed)


class JudgeVerdict(FrozenModel):
    """What the semantic judge found (`judge.SemanticJudge`)."""

    failures: tuple[GateFailure, ...] = ()
    #: Set when the judge's model gave no verdict and the deterministic checks decided: why.
    note: str | None = None
    #: What the judge's model answered, and its cost; None when no model was asked.
    record: JudgeRecord | None = None


Judge = Callable[[ParsedOutput, StateSnapshot], JudgeVerdict]

_PASSED = {gate: GateCheck(gate=gate, passed=True, failures=0) for gate in GateName}


def run_gate(
    raw: str,
    snapshot: StateSnapshot,
    config: GateConfig | None = None,
    judge: Judge | None = None,
    hygiene: OutputHygiene = OutputHygiene.CLEAN,
    special_tokens: tuple[str, ...] = (),
) -> GateResult:
    """Parse and validate one model output."""
    return validate(parse_output(raw), raw, snapshot, config or GateConfig(), judge, hygiene, special_tokens)


def validate(
    parse: ParseResult,
    raw: str,
    snapshot: StateSnapshot,
    config: GateConfig,
    judge: Judge | None = None,
    hygiene: OutputHygiene = OutputHygiene.CLEAN,
    special_tokens: tuple[str, ...] = (),
    cut_at: int | None = None,
    *,
    prefix: bool = False,
) -> GateResult:
    """`hygiene` is the NPC's profile setting (`NpcProfile.output_hygiene`); `special_tokens`
    the loaded model's (`InferenceBackend.special_tokens`), never to be shown to a player;
    `cut_at` the dialogue length the output schema allows (`GenerationLimits.dialogue_chars`):
    a dialogue that long that ends no sentence was cut by the grammar (see `hygiene`); `prefix`:
    the dialogue may go on (streaming), so a rule more words can satisfy (`non_answers`) waits."""
    output, schema_error, scrubbed = _to_output(parse, snapshot, hygiene, cut_at)
    ledger = _Ledger(parse.path, scrubbed.findings if scrubbed is not None else ())

    # 1. hard limits
    said = said_texts(output, raw)
    hard = _hard_limit_failures(raw, output, scrubbed, snapshot, config, special_tokens, prefix)
    hard.extend(_constraint_failures(snapshot, output, raw, said, critical=True))
    if ledger.record(GateName.HARD_LIMITS, hard):
        return ledger.result(output)

    # 2. schema
    if output is None:
        failure = GateFailure(gate=GateName.SCHEMA, reason=schema_error, severity=Severity.HARD, rule_id=OUTPUT_SCHEMA_RULE)
        ledger.record(GateName.SCHEMA, [failure])
        return ledger.result(None)
    ledger.record(GateName.SCHEMA, [])

    # 3. constraints
    ledger.record(GateName.CONSTRAINTS, _constraint_failures(snapshot, output, raw, said, critical=False))

    # 4. canonical: no claim of a canonical fact, nor of a world-state key the prompt carried,
    # contradicted; no number about a value the prompt carried stated otherwise (world state is
    # authoritative too). A mutation aimed at a canonical fact's key is refused as an override
    # (step 6) and never written, so its text contradicts nothing: the reply may stand.
    canonical = snapshot.canonical_ids()
    texts = [output.dialogue] + mutation_texts(output, skip=lambda m: stored_key(m) in canonical)
    contradictions, ungrounded = claim_failures(texts, snapshot)
    ledger.record(GateName.CANONICAL, contradictions)
    ledger.record(GateName.GROUNDING, ungrounded)

    # 5. knowledge boundary, in everything the model wrote (`said`, every mutation's text too):
    # what hygiene stripped was still written by the model, so it is looked at as well
    said = said if scrubbed is None or scrubbed.original == output.dialogue else [scrubbed.original, *said]
    if ledger.record(GateName.KNOWLEDGE, secret_leaks(said, snapshot.secrets)):
        return ledger.result(output)

    # 6. mutations, each on its own
    approved, rejected, intents = partition_mutations(output, snapshot)
    ledger.checks.append(GateCheck(gate=GateName.MUTATIONS, passed=not rejected, failures=len(rejected)))

    # 7. semantic judge (optional)
    if config.semantic_judge and judge is not None:
        _ask_judge(ledger, judge, output, snapshot)

    # Only soft failures on the last attempt bend; anything else fails the attempt, and nothing
    # of a failed attempt is approved (its mutations were only checked, never accepted).
    failures = ledger.failures
    if failures and (not all(f.severity is Severity.SOFT for f in failures) or snapshot.can_retry):
        return ledger.result(output, rejected_mutations=rejected)
    return ledger.result(
        output, accepted=True, approved_mutations=approved, rejected_mutations=rejected, approved_intents=intents
    )


def _ask_judge(ledger: _Ledger, judge: Judge, output: ParsedOutput, snapshot: StateSnapshot) -> None:
    """The semantic judge's verdict in the ledger. Not asked once a hard rule has failed this
    attempt: the attempt fails anyway and the repair already names a reason, so the model call
    is saved."""
    if any(f.severity is not Severity.SOFT for f in ledger.failures):
        ledger.checks.append(GateCheck(gate=GateName.SEMANTIC, passed=True, skipped="a hard rule already failed this attempt"))
        return
    verdict = judge(output, snapshot)
    ledger.record(GateName.SEMANTIC, list(verdict.failures), note=verdict.note)
    ledger.judge = verdict.record


class _Ledger:
    """The checks and failures of one `validate` run, in the order the gates ran."""

    def __init__(self, parse_path: ParsePath, findings: tuple[OutputFinding, ...]) -> None:
        self.parse_path = parse_path
        self.findings = findings
        self.checks: list[GateCheck] = []
        self.failures: list[GateFailure] = []
        self.judge: JudgeRecord | None = None

    def record(self, gate: GateName, found: list[GateFailure], note: str | None = None) -> bool:
        """Record a gate's failures; True when the run must stop (a critical failure)."""
        # A passed check is one frozen value per gate, made once (most checks pass).
        if note is not None:
            self.checks.append(GateCheck(gate=gate, passed=not found, failures=len(found), note=note))
        else:
            self.checks.append(_PASSED[gate] if not found else GateCheck(gate=gate, passed=False, failures=len(found)))
        self.failures.extend(found)
        return any(f.severity is Severity.CRITICAL for f in found)

    def result(self, output: ParsedOutput | None = None, *, accepted: bool = False, **partition: tuple) -> GateResult:
        return GateResult(
            parse_path=self.parse_path,
            output=output,
            checks=tuple(self.checks),
            failures=tuple(self.failures),
            findings=self.findings,
            accepted=accepted,
            judge=self.judge,
            **partition,
        )


def _hard_limit_failures(
    raw: str,
    output: ParsedOutput | None,
    scrubbed: Scrubbed | None,
    snapshot: StateSnapshot,
    config: GateConfig,
    special_tokens: tuple[str, ...],
    prefix: bool = False,
) -> list[GateFailure]:
    """The hard limits on the output itself, in the module's order (critical constraints aside)."""
    hard: list[GateFailure] = []
    if len(raw) > config.max_raw_chars:
        hard.append(
            GateFailure(
                gate=GateName.HARD_LIMITS,
                reason=f"output is {len(raw)} characters, the hard limit is {config.max_raw_chars}",
                severity=Severity.CRITICAL,
                rule_id=MAX_RAW_CHARS_RULE,
            )
        )
    if scrubbed is not None:
        hard.extend(scrubbed.failures)
    if output is None:
        return hard
    # Looked for in what the model wrote, before hygiene stripped anything: "[manifest] task=…"
    # with its bracket stripped as markup would otherwise reach the player as "task=…".
    written = scrubbed.original if scrubbed is not None else output.dialogue
    hard.extend(_prompt_markup(written))
    hard.extend(find_instructions_read_out(written, snapshot))
    # What is left once hygiene stripped an assistant's sentences beside the NPC's own.
    asked_for = any(o.requested for o in snapshot.offered_intents) or bool(snapshot.refused_requests or snapshot.deals)
    hard.extend(find_assistant_register(output.dialogue, snapshot.npc_name, asked_for=asked_for))
    # Special tokens are looked for before hygiene stripped them as markup: a model that
    # writes its own template is broken whatever is left.
    limits = snapshot.output_limits
    before = scrubbed.original if scrubbed is not None else None
    hard.extend(find_degenerate(output.dialogue, limits, special_tokens, before_hygiene=before))
    hard.extend(find_parroting(output.dialogue, limits, **vars(copy_sources(snapshot))))
    said, whole = snapshot.context.said(), not prefix and not output.grants  # a grant said again keeps its sale
    hard.extend(find_self_repeats(output.dialogue, said, snapshot.recent_replies, limits, repeat_context(snapshot), whole=whole))
    if not prefix:  # "I'm Brom." may be the start of an answer; the intent follows the dialogue
        hard.extend(non_answer_of(output, snapshot, scrubbed.findings if scrubbed is not None else ()))
        hard.extend(grants_in_words_only(output, snapshot))
    hard.extend(deal_failures(output, snapshot, prefix=prefix))  # words against the rules' outcome, as they come
    hard.extend(
        find_other_voices(before or output.dialogue, snapshot.context.scene_turn, snapshot.npc_name, snapshot.allowed_intents)
        or find_player_voice(output.dialogue, snapshot.context.said())
    )
    return hard


def _prompt_markup(written: str) -> list[GateFailure]:
    """The prompt's own markup said (small models copy it; the player must never hear it), or a
    heading of the prompt said as the whole line ("Situation")."""
    leaked = [marker for marker in SCAFFOLDING_MARKERS if marker in written]
    words = norm_words(written)
    if not leaked and words and all(word in HEADING_WORDS for word in words):
        leaked = [written.strip()]
    if not leaked:
        return []
    return [
        GateFailure(
            gate=GateName.HARD_LIMITS,
            reason=f"dialogue repeats the prompt's markup ({leaked[0].strip()!r})",
            severity=Severity.HARD,
            rule_id=PROMPT_MARKUP_RULE,
            evidence=leaked[0].strip(),
        )
    ]


def copy_sources(snapshot: StateSnapshot) -> CopySources:
    """What a reply may not copy: the examples, the player's line and earlier lines, the prompt's
    own text (the persona, and in a scene its situation) and the intents the line asks for."""
    turn = snapshot.context.scene_turn
    texts = (snapshot.persona,) if turn is None else (snapshot.persona, scene_situation(turn, snapshot.context.scene))
    return CopySources(
        examples=snapshot.few_shot,
        player_input=snapshot.context.said(),
        prompt_texts=texts,
        earlier_inputs=tuple(r.player for r in snapshot.recent_replies),
        requested=tuple(o.intent() for o in snapshot.offered_intents if o.requested and o.fixed)
        + tuple(d.offer.intent() for d in snapshot.deals if not d.granted),
    )


def _constraint_failures(
    snapshot: StateSnapshot, output: ParsedOutput | None, raw: str, said: list[str], *, critical: bool
) -> list[GateFailure]:
    """Failures of the critical constraints (a hard limit) or of the others (the constraints gate)."""
    gate = GateName.HARD_LIMITS if critical else GateName.CONSTRAINTS
    found: list[GateFailure] = []
    for c in snapshot.constraints.constraints:
        if (c.severity is Severity.CRITICAL) is critical:
            found.extend(check_constraint(c, output, raw, gate, said=said))
    return found


def _to_output(
    parse: ParseResult, snapshot: StateSnapshot, hygiene: OutputHygiene, cut_at: int | None = None
) -> tuple[ParsedOutput | None, str, Scrubbed | None]:
    """The parsed JSON as a ParsedOutput (dialogue scrubbed by output hygiene, which may also
    give it its emotion), or None and why it does not fit; and what hygiene found."""
    if parse.data is None:
        return None, parse.error or "no JSON object", None
    data = dict(parse.data)
    scrubbed = None
    if isinstance(data.get("dialogue"), str):
        emotion = data.get("emotion", Emotion.NEUTRAL.value)
        scrubbed = scrub_dialogue(
            data["dialogue"],
            npc_name=snapshot.npc_name,
            npc_id=snapshot.npc_id,
            policy=hygiene,
            map_emotion=emotion == Emotion.NEUTRAL.value,
            cut_at=cut_at,
        )
        scrubbed = without_repeats(scrubbed, snapshot, hygiene)
        # A reply hygiene emptied keeps its words here only so the attempt's record shows them:
        # its hard failure means it is never spoken.
        data["dialogue"] = scrubbed.text or scrubbed.original
        if scrubbed.emotion is not None:
            data["emotion"] = scrubbed.emotion.value
    try:
        return ParsedOutput.model_validate(data), "", scrubbed
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()[:3]]
        return None, "output does not match the schema: " + "; ".join(parts), scrubbed


def partition_mutations(
    output: ParsedOutput, snapshot: StateSnapshot
) -> tuple[tuple[ProposedMutation, ...], tuple[RejectedMutation, ...], tuple[WorldIntent, ...]]:
    canonical = snapshot.canonical_ids()
    specs = {spec.type: spec for spec in snapshot.allowed_intents}
    approved: list[ProposedMutation] = []
    rejected: list[RejectedMutation] = []
    intents: list[WorldIntent] = []
    for m in output.mutations:
        # Authority is checked on the key the write would use, not on the name the model gave.
        key = stored_key(m)
        if key is not None and key in canonical:
            rejected.append(RejectedMutation(mutation=m, reason=f"{key} is a canonical fact", canonical_override=True))
            continue
        if isinstance(m, TransformBeliefMutation) and not (0.0 <= m.confidence <= 1.0):
            rejected.append(RejectedMutation(mutation=m, reason="confidence outside 0..1"))
            continue
        if isinstance(m, EmitWorldIntentMutation):
            problem = declined_problem(m, snapshot.deals) or grant_problem(
                m, specs.get(m.intent), snapshot.offered_intents, snapshot.refused_requests, output.dialogue
            )
            if problem:
                rejected.append(RejectedMutation(mutation=m, reason=problem))
                continue
            intents.append(WorldIntent(type=m.intent, params=m.params, payment=payment_of(m, snapshot.deals)))
        approved.append(m)
    return tuple(approved), tuple(rejected), tuple(intents)
