"""Memory consolidation by the model: what an NPC is about to forget, summarised in idle time.

When an NPC's long-term memory nears its limit (`due`), the entries the deterministic
consolidation would drop next (`fading`: the least significant of the oldest, see
`loreguard.memory.consolidation`) are shown to the model, which writes at most three notes in the
NPC's words. Each note goes through the gate's own checks for memory writes (it may not reveal a
secret or contradict a canonical fact or the world state) and one of its own: it may say only
what the memories it summarises say (`review`). The approved notes are
written (tagged `summary`, never canon: an episodic memory like any other) and the fading entries
removed, in one batch with its audit record; the record replays like an interaction's. When the
gate refuses every note, or the model gives none, nothing changes and the record says why; the
deterministic consolidation still bounds memory when the limit is reached.

Pure except `summarise`, which asks the model; the lifecycle commits (`GovernancePipeline.consolidate`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field, ValidationError

from loreguard.memory.claims import find_contradictions
from loreguard.memory.consolidation import keep_most_significant, oldest_block
from loreguard.memory.hashing import sha256_hex
from loreguard.memory.policy import MemoryPolicy
from loreguard.memory.recall import RecallIndex
from loreguard.memory.store import StoreView
from loreguard.schemas.base import FrozenModel, JsonScalar, UnitInterval
from loreguard.schemas.memory import (
    AppendEpisodic,
    Authority,
    CanonicalFact,
    EpisodicEntry,
    MemoryKind,
    MemoryWrite,
    RemoveEntry,
    ScopeMemory,
    StateClaim,
)
from loreguard.schemas.npc import NpcProfile
from loreguard.schemas.output import MAX_MUTATION_TEXT, AppendEpisodicMutation
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import (
    AttemptRecord,
    GateCheck,
    GateFailure,
    GateName,
    InteractionOutcome,
    InteractionResult,
    ParsePath,
    Receipt,
    RejectedMutation,
)
from loreguard.schemas.rules import Severity
from loreguard.server.inference.base import Generation, GenerationRequest, InferenceBackend
from loreguard.server.pipeline.gate.checks import secret_leaks
from loreguard.server.pipeline.snapshot import merged_state
from loreguard.text.words import keywords

#: The receipt's task type of a consolidation, which is how a replay tells it from an interaction.
TASK = "memory_consolidation"
#: The tag of a note the model wrote in a consolidation.
SUMMARY_TAG = "summary"
MAX_NOTES = 3
#: A note becomes an episodic memory (`AppendEpisodicMutation`): no longer than one may be.
MAX_NOTE_CHARS = MAX_MUTATION_TEXT
#: Fading entries shown to the model at most (the most significant first); the rest go unsummarised.
MAX_SHOWN = 24

SUMMARY_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "notes": {
            "type": "array",
            "maxItems": MAX_NOTES,
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": MAX_NOTE_CHARS},
                    "significance": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["text", "significance"],
            },
        }
    },
    "required": ["notes"],
}


class SummaryNote(FrozenModel):
    text: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    significance: UnitInterval


class SummaryOutput(FrozenModel):
    notes: tuple[SummaryNote, ...] = Field(max_length=MAX_NOTES)


class Review(FrozenModel):
    """The gate's verdict on a summary."""

    parse_path: ParsePath
    approved: tuple[SummaryNote, ...] = ()
    #: Each refused note with the reason.
    refused: tuple[tuple[SummaryNote, str], ...] = ()
    failures: tuple[GateFailure, ...] = ()
    gates: tuple[GateCheck, ...] = ()


def due(memory: ScopeMemory, policy: MemoryPolicy) -> bool:
    """Whether the NPC's memory is within an eighth of its limit: time to summarise before the
    deterministic consolidation drops what fades."""
    return len(memory.episodic) >= policy.episodic_limit - policy.episodic_limit // 8


def fading(memory: ScopeMemory, policy: MemoryPolicy, index: RecallIndex) -> tuple[EpisodicEntry, ...]:
    """The entries the next consolidation would drop, oldest first; summaries are never summarised again."""
    block = oldest_block(memory.episodic, policy.consolidation_block)
    _, dropped = keep_most_significant(block, policy.consolidation_keep, index)
    return tuple(e for e in dropped if SUMMARY_TAG not in e.tags)


def summary_prompt(profile: NpcProfile, facts: Sequence[CanonicalFact], entries: Sequence[EpisodicEntry]) -> Prompt:
    """What the model reads: who it is, what holds, and the fading memories (most significant
    first, at most `MAX_SHOWN`)."""
    shown = sorted(entries, key=lambda e: (-e.significance, e.seq))[:MAX_SHOWN]
    canon = "".join(f"- {fact.text}\n" for fact in sorted(facts, key=lambda f: f.id))
    system = (
        f"You are {profile.name}. {profile.persona}\n"
        + (f"What is true, always:\n{canon}" if canon else "")
        + "You are looking back on old memories before they fade. Keep what matters: who, what, where, "
        "what the player told you or asked of you. Write only what the memories say; never invent. "
        f'Answer with JSON: {{"notes": [{{"text": "...", "significance": 0.0-1.0}}]}}, at most {MAX_NOTES} notes, '
        "each one sentence in your own words."
    )
    listing = "".join(f"- {e.text}\n" for e in sorted(shown, key=lambda e: e.seq))
    return Prompt(
        static_prefix=system,
        dynamic_suffix="",
        manifest=f"[manifest] task={TASK} fading={len(entries)} shown={len(shown)}",
        context_keys=tuple(f"episodic:{e.id}" for e in sorted(shown, key=lambda e: e.seq)),
        player_turn=f"Fading memories:\n{listing}Your notes:",
    )


def summary_seed(npc_id: str, entries: Iterable[EpisodicEntry]) -> int:
    """A seed from what is summarised, so a replay asks the same."""
    return int(sha256_hex(npc_id + "\n" + ",".join(str(e.seq) for e in entries))[:8], 16)


#: The share of a note's words that may be missing from what it summarises: a summary restates,
#: it does not add ("I am a Roman soldier" from memories about the road is refused).
MAX_UNGROUNDED = 0.34


def review(
    raw: str,
    profile: NpcProfile,
    facts: Sequence[CanonicalFact],
    state: Sequence[tuple[str, JsonScalar]],
    state_claims: Mapping[str, StateClaim],
    sources: Sequence[EpisodicEntry] = (),
) -> Review:
    """Parse the model's summary and check each note as the gate checks a memory the model
    writes (no secret revealed, no canonical fact or world state contradicted), and that it
    says only what the summarised memories (`sources`) and the NPC's name say."""
    try:
        output = SummaryOutput.model_validate_json(raw)
    except ValidationError as exc:
        failure = GateFailure(
            gate=GateName.SCHEMA, reason=f"the summary is not the asked JSON: {exc.errors()[0]['msg']}", severity=Severity.HARD
        )
        return Review(
            parse_path=ParsePath.FAILED, failures=(failure,), gates=(GateCheck(gate=GateName.SCHEMA, passed=False, failures=1),)
        )
    approved: list[SummaryNote] = []
    refused: list[tuple[SummaryNote, str]] = []
    failures: list[GateFailure] = []
    grounds = frozenset().union(keywords(profile.name), *(keywords(e.text) for e in sources))
    for note in output.notes:
        found = secret_leaks([note.text], profile.secrets)
        said = keywords(note.text)
        new = sorted(said - grounds)
        if not said or len(new) > MAX_UNGROUNDED * len(said):
            found.append(
                GateFailure(
                    gate=GateName.GROUNDING,
                    reason=f"says what the memories do not: {', '.join(new[:6]) or 'nothing of them'}",
                    severity=Severity.HARD,
                )
            )
        for hit in find_contradictions(note.text, facts, state, state_claims):
            what = f"world state {hit.state_key}" if hit.state_key else f"canonical fact {hit.fact_id}"
            found.append(
                GateFailure(gate=GateName.CANONICAL, reason=f"contradicts {what}", severity=Severity.HARD, rule_id=hit.label)
            )
        if found:
            refused.append((note, "; ".join(f.reason for f in found)))
            failures.extend(found)
        else:
            approved.append(note)
    gates = (
        GateCheck(gate=GateName.SCHEMA, passed=True),
        GateCheck(gate=GateName.GROUNDING, passed=not any(f.gate is GateName.GROUNDING for f in failures)),
        GateCheck(gate=GateName.KNOWLEDGE, passed=not any(f.gate is GateName.KNOWLEDGE for f in failures)),
        GateCheck(gate=GateName.CANONICAL, passed=not any(f.gate is GateName.CANONICAL for f in failures)),
    )
    return Review(
        parse_path=ParsePath.STRICT, approved=tuple(approved), refused=tuple(refused), failures=tuple(failures), gates=gates
    )


def summary_writes(npc_id: str, entries: Sequence[EpisodicEntry], notes: Sequence[SummaryNote]) -> list[MemoryWrite]:
    """The approved notes written and the summarised entries removed, in one batch; nothing
    when no note was approved (the entries stay)."""
    if not notes:
        return []
    at = max(e.at_interaction for e in entries)
    # Removals first: the notes then never push memory past its limit within the batch (where
    # the store's own consolidation would take entries this batch is about to remove).
    writes = [
        MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=RemoveEntry(scope=npc_id, kind=MemoryKind.EPISODIC, entry_id=e.id))
        for e in sorted(entries, key=lambda e: e.seq)
    ]
    writes += [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=AppendEpisodic(scope=npc_id, text=n.text, significance=n.significance, at_interaction=at, tags=(SUMMARY_TAG,)),
        )
        for n in notes
    ]
    return writes


def summary_receipt(
    *,
    npc_id: str,
    interaction_index: int,
    seed: int,
    prompt: Prompt,
    raw: str,
    tokens: tuple[int, int, int],
    verdict: Review,
    hash_before: str,
    hash_after: str,
) -> Receipt:
    """The record of a consolidation, in an interaction's receipt: one attempt (the model's
    summary), the notes written as applied mutations and the refused ones as rejected."""
    evaluated, cached, generated = tokens
    full = prompt.full
    attempt = AttemptRecord(
        attempt=1,
        prompt_hash=sha256_hex(full),
        raw_output=raw,
        output_hash=sha256_hex(raw),
        parse_path=verdict.parse_path,
        gates=verdict.gates,
        failures=verdict.failures,
        tokens_evaluated=evaluated,
        tokens_cached=cached,
        tokens_generated=generated,
    )
    kept = bool(verdict.approved)
    if kept:
        reason = None
    elif verdict.parse_path is ParsePath.FAILED:
        reason = "summary_unreadable"
    else:
        reason = "summary_refused" if verdict.refused else "summary_empty"
    return Receipt(
        npc_id=npc_id,
        interaction_index=interaction_index,
        seed=seed,
        task_type=TASK,
        manifest=prompt.manifest,
        context_keys=prompt.context_keys,
        constraints=(),
        sufficiency="pass",
        attempts=(attempt,),
        outcome=InteractionOutcome.VALIDATED if kept else InteractionOutcome.FALLBACK,
        fallback_used=not kept,
        fallback_reason=reason,
        memory_hash_before=hash_before,
        memory_hash_after=hash_after,
        snapshot_hash=sha256_hex(full),
        constraints_hash=sha256_hex(""),
        applied_mutations=tuple(AppendEpisodicMutation(text=n.text, significance=n.significance) for n in verdict.approved),
        rejected_mutations=tuple(
            RejectedMutation(mutation=AppendEpisodicMutation(text=n.text, significance=n.significance), reason=why)
            for n, why in verdict.refused
        ),
    )


@dataclass(frozen=True)
class Summary:
    """A consolidation worked out: what was shown, what the model wrote, what the gate let
    through, and the batch that follows (empty when nothing was approved)."""

    npc_id: str
    prompt: Prompt
    seed: int
    generation: Generation
    verdict: Review
    writes: list[MemoryWrite]

    def result(self, view: StoreView, hash_after: str) -> InteractionResult:
        receipt = summary_receipt(
            npc_id=self.npc_id, interaction_index=view.interactions, seed=self.seed, prompt=self.prompt,
            raw=self.generation.text,
            tokens=(self.generation.tokens_evaluated, self.generation.tokens_cached, self.generation.tokens_generated),
            verdict=self.verdict, hash_before=view.memory_hash, hash_after=hash_after,
        )  # fmt: skip
        return InteractionResult(
            npc_id=self.npc_id, outcome=receipt.outcome, dialogue="", attempts=1, fallback_used=receipt.fallback_used,
            receipt=receipt,
        )  # fmt: skip


def summarise(view: StoreView, policy: MemoryPolicy, backend: InferenceBackend) -> Summary | None:
    """Ask the model for the summary of what the NPC of `view` is about to forget and review it;
    None when nothing is due. The model runs in its own sequence (`NPC#memory`), so the NPC's
    cached dialogue prefix stays. `BackendError` when the model cannot answer."""
    npc_id = view.profile.id
    entries = fading(view.npc, policy, view.recall) if due(view.npc, policy) else ()
    if not entries:
        return None
    facts = [c.fact for c in view.world_memory.canonical + view.npc.canonical]
    prompt = summary_prompt(view.profile, facts, entries)
    seed = summary_seed(npc_id, entries)
    request = GenerationRequest(npc_id=f"{npc_id}#memory", prompt=prompt, seed=seed, max_tokens=320, output_schema=SUMMARY_SCHEMA)
    generation = backend.generate(request)
    state = merged_state(view.world_memory, view.npc)
    claims = view.world.state_claims if view.world else {}
    verdict = review(generation.text, view.profile, facts, tuple(sorted(state.items())), claims, entries)
    return Summary(npc_id, prompt, seed, generation, verdict, summary_writes(npc_id, entries, verdict.approved))
