"""Stage 4: retrieval into an immutable, content-hashed StateSnapshot.

Everything the prompt and the gate will see is fixed here, in strict order. A retry does not
re-read memory: it derives a new snapshot with `for_retry`, so every attempt of one interaction
sees the same memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from operator import attrgetter

from loreguard.memory.hashing import content_hash
from loreguard.memory.memo import IdentityMemo
from loreguard.memory.recall import RecallIndex
from loreguard.memory.retrieval import RetrievalQuery, retrieve_beliefs, retrieve_episodic
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.memory import RESERVED_STATE_PREFIX, Belief, CanonicalFact, EpisodicEntry, ScopeMemory, StateClaim
from loreguard.schemas.npc import (
    Economy,
    FewShotExample,
    IntentSpec,
    NpcProfile,
    OutputLimits,
    Secret,
    UngroundedNumbers,
    WorldDefinition,
)
from loreguard.schemas.rules import RuleType
from loreguard.server.pipeline.contract import ContextContract, Section
from loreguard.server.pipeline.expectancy import ConstraintSet
from loreguard.server.pipeline.turn.deals import Deal, DealTable, decide, forbidden_now, ware_facts
from loreguard.server.pipeline.turn.intents import OfferedIntent, RefusedRequest, intent_table
from loreguard.server.pipeline.turn.transcript import (
    EXCHANGE_TAG,
    MODEL_TAG,
    RecentReply,
    conversation_window,
    recent_replies,
    replayed_changes,
    said_in,
    scene_tag,
)


class ScoredEpisode(FrozenModel):
    entry: EpisodicEntry
    score: float


class ScoredBelief(FrozenModel):
    belief: Belief
    score: float


class StateSnapshot(FrozenModel):
    npc_id: str
    npc_name: str
    persona: str
    world_lore: str
    profile_hash: str
    #: Hash of the contents of the NPC and world scopes this snapshot was taken from
    #: (`StoreView.scopes_hash`: without the store's sequence counter).
    memory_hash: str
    interaction_index: int
    seed: int
    attempt: int = 1
    max_attempts: int = 3
    context: InteractionContext
    contract: ContextContract
    #: World facts first, then the NPC's, each by id.
    canonical: tuple[CanonicalFact, ...]
    #: Merged world state (NPC keys override world keys), by key.
    world_state: tuple[tuple[str, JsonScalar], ...]
    #: Keys whose value was derived (not set by the game) for this interaction.
    derived_keys: tuple[str, ...] = ()
    #: The world's claims about the keys in `world_state`, by key: the canonical gate checks
    #: replies against the value each key has here (none when the prompt carries no world state).
    state_claims: tuple[tuple[str, StateClaim], ...] = ()
    episodic: tuple[ScoredEpisode, ...] = ()
    episodic_available: int = 0
    beliefs: tuple[ScoredBelief, ...] = ()
    beliefs_available: int = 0
    exchanges: tuple[EpisodicEntry, ...] = ()
    #: The NPC's last replies (`output_limits.repeat_window`, newest first), shown in the prompt
    #: or not: the gate's `repeats_itself` limit compares a new reply with them. Derived from
    #: memory, which `memory_hash` covers.
    recent_replies: tuple[RecentReply, ...] = ()
    #: How many conversation exchanges memory holds for the NPC: with the interaction index, how
    #: many of its interactions ended without one (fallbacks), which rotates the fallback lines.
    exchanges_held: int = 0
    #: Beliefs a canonical fact contradicts, by id: past replies shown in the prompt leave out
    #: the changes that wrote them, as the belief section does.
    contradicted_beliefs: tuple[str, ...] = ()
    constraints: ConstraintSet
    #: In the designer's order: the order of examples is authored content.
    few_shot: tuple[FewShotExample, ...] = ()
    secrets: tuple[Secret, ...] = ()
    allowed_intents: tuple[IntentSpec, ...] = ()
    #: The intents the model may grant this turn (`intents`): what the player's line asked
    #: for, the intents without cues, the ones a rule requires; none a rule forbids.
    offered_intents: tuple[OfferedIntent, ...] = ()
    #: What the player asked for in words a hard rule forbids ("bread for free"): not offered,
    #: and named in the prompt with the rule (`intents.RefusedRequest`).
    refused_requests: tuple[RefusedRequest, ...] = ()
    #: The requests the rules decided (`deals`): a sale is among `offered_intents` as decided,
    #: a decline is not offered at all.
    deals: tuple[Deal, ...] = ()
    #: The NPC's wares whose stock the game reports as gone: saying there are none is true.
    sold_out: tuple[str, ...] = ()
    #: What the player's line asks for that the NPC does not sell (stemmed): not to be offered.
    asked_unsold: tuple[str, ...] = ()
    #: The repair message for this attempt: why the previous one was rejected.
    repair: str = ""
    #: On a retry, the first attempt's rules: the prompt keeps showing them where they were (so
    #: a retry reuses the cached conversation after them) and names what the retry escalated or
    #: added in its correction instead. None on a first attempt.
    first_constraints: ConstraintSet | None = None
    #: The prompt's character budget (profile bounds).
    max_chars: int = 12000
    #: What the gate does with an amount of money the context does not cover (profile setting).
    ungrounded_numbers: UngroundedNumbers = UngroundedNumbers.ALLOW
    #: Degenerate-output and parroting limits the gate applies (profile setting).
    output_limits: OutputLimits = OutputLimits()

    @property
    def can_retry(self) -> bool:
        return self.attempt < self.max_attempts

    def for_retry(self, escalated_constraints: ConstraintSet, repair: str = "") -> StateSnapshot:
        """The same memory, the next attempt, with escalated constraints and a repair note."""
        first = self.first_constraints if self.first_constraints is not None else self.constraints
        return self.model_copy(
            update={
                "attempt": self.attempt + 1,
                "constraints": escalated_constraints,
                "repair": repair,
                "first_constraints": first,
            }
        )

    def snapshot_hash(self) -> str:
        """Content hash of everything the snapshot was made from. Memory and profile enter by
        their own hashes (which cover every entry and field), so only the selection made from
        them is serialized here."""
        inputs: dict[str, object] = {
            "memory": self.memory_hash,
            "profile": self.profile_hash,
            "constraints": self.constraints.hash(),
            "world_lore": self.world_lore,
            "context": self.context.model_dump(mode="json"),
            "contract": self.contract.model_dump(mode="json"),
            "interaction_index": self.interaction_index,
            "seed": self.seed,
            "attempt": [self.attempt, self.max_attempts],
            "world_state": [[k, v] for k, v in self.world_state],
            "derived_keys": list(self.derived_keys),
            "episodic": [[e.entry.id, e.score] for e in self.episodic],
            "beliefs": [[b.belief.id, b.score] for b in self.beliefs],
            "exchanges": [e.id for e in self.exchanges],
            "repair": self.repair,
        }
        if self.state_claims:  # absent when none, so a world without state claims hashes as before
            inputs["state_claims"] = [[key, claim.model_dump(mode="json")] for key, claim in self.state_claims]
        return content_hash(inputs)

    def canonical_ids(self) -> frozenset[str]:
        return _CANONICAL_IDS.get(self.canonical, lambda: frozenset(fact.id for fact in self.canonical))


#: Per tuple of fact objects (the same every interaction until the designer registers again).
_CANONICAL_IDS: IdentityMemo[frozenset[str]] = IdentityMemo(maxsize=256)
#: Per pair of scopes' stored-fact tuples, which a commit replaces only when it adds a fact:
#: every snapshot until then shares one tuple of facts (and what is memoised on it).
_FACTS: IdentityMemo[tuple[CanonicalFact, ...]] = IdentityMemo(maxsize=256)


def _facts(world_memory: ScopeMemory, npc_memory: ScopeMemory, profile: NpcProfile) -> tuple[CanonicalFact, ...]:
    """World facts first, then the NPC's, each by id (as the scopes keep them); then what the
    NPC sells and at what price (`ware_facts`, from its profile)."""
    stored = tuple(c.fact for c in world_memory.canonical) + tuple(c.fact for c in npc_memory.canonical)
    return stored + ware_facts(profile.name, profile.allowed_intents)


def merged_state(world: ScopeMemory, npc: ScopeMemory, derived: Mapping[str, JsonScalar] | None = None) -> dict[str, JsonScalar]:
    """World-scope state, overridden by NPC-scope state, completed by derived values; the
    sidecar's own keys (`RESERVED_STATE_PREFIX`, the game's seed) are no one else's business."""
    state: dict[str, JsonScalar] = {e.key: e.value for e in world.world_state if not e.key.startswith(RESERVED_STATE_PREFIX)}
    state.update({e.key: e.value for e in npc.world_state if not e.key.startswith(RESERVED_STATE_PREFIX)})
    for key, value in (derived or {}).items():
        state.setdefault(key, value)
    return state


def _offers(
    context: InteractionContext,
    profile: NpcProfile,
    constraints: ConstraintSet,
    state: Mapping[str, JsonScalar],
    world: WorldDefinition | None,
) -> DealTable:
    # Only the player asks for an intent: in a scene, what another NPC says offers none.
    asked = context.scene_turn.player_words() if context.scene_turn is not None else context.player_input
    prohibitions = [c for c in constraints.constraints if c.type is RuleType.PROHIBITION]
    forbidding = {
        i: forbidden_now(c.rule_id, c.text) for c in reversed(constraints.constraints) for i in c.checks.forbidden_intents
    }
    table = intent_table(
        asked,
        profile.allowed_intents,
        forbidden=forbidding,
        required=(i for c in constraints.constraints for i in c.checks.required_intents),
        forbidden_terms=((c.rule_id, phrase) for c in prohibitions for phrase in c.checks.forbidden_requests),
    )
    economy = world.economy if world is not None else Economy()
    return decide(table, profile.allowed_intents, asked, state, economy, forbidding)


def _conversation_and_memories(
    npc_memory: ScopeMemory, max_exchanges: int, hidden_tag: str | None = None
) -> tuple[list[EpisodicEntry], tuple[EpisodicEntry, ...], list[EpisodicEntry], set[tuple[str, str]]]:
    """(every exchange, the exchanges the conversation shows, the memories retrieval picks from,
    the beliefs the shown turns wrote), all in memory's order (by seq). Memories tagged
    `hidden_tag` (the lines of the scene going on) are none of these."""
    all_exchanges: list[EpisodicEntry] = []
    others: list[EpisodicEntry] = []
    for entry in npc_memory.episodic:
        if EXCHANGE_TAG in entry.tags:
            all_exchanges.append(entry)
        elif hidden_tag is None or hidden_tag not in entry.tags:
            others.append(entry)
    # The conversation shows the newest exchanges; older ones are memories like any other, which
    # retrieval brings back when the player's line calls for them.
    window = conversation_window(len(all_exchanges), max_exchanges) if max_exchanges else len(all_exchanges)
    exchanges = tuple(all_exchanges[window:]) if max_exchanges else ()
    # What the NPC noted or came to believe in the turns the prompt replays is in those turns'
    # replies (approved changes only): the memory sections do not list it a second time.
    noted, believed = replayed_changes(exchanges)
    memories = [e for e in others if not (MODEL_TAG in e.tags and e.text in noted)] if noted else others
    if window:
        memories = sorted(memories + all_exchanges[:window], key=_BY_SEQ)
    return all_exchanges, exchanges, memories, believed


_BY_SEQ = attrgetter("seq")


def _query(said: str, interaction_index: int, profile: NpcProfile, sections: set[Section], decay: float) -> RetrievalQuery:
    """What retrieval looks for: the memories the player's line calls up, as many as the
    profile's bounds allow of the sections the contract carries."""
    bounds = profile.bounds
    return RetrievalQuery(
        player_input=said,
        now_interaction=interaction_index,
        max_episodic=bounds.max_episodic if Section.EPISODIC in sections else 0,
        max_beliefs=bounds.max_beliefs if Section.BELIEFS in sections else 0,
        belief_threshold=bounds.belief_threshold,
        decay=decay,
    )


def build_snapshot(
    *,
    context: InteractionContext,
    interaction_index: int,
    seed: int,
    profile: NpcProfile,
    profile_hash: str,
    memory_hash: str,
    world: WorldDefinition | None,
    npc_memory: ScopeMemory,
    world_memory: ScopeMemory,
    contract: ContextContract,
    constraints: ConstraintSet,
    derived: Mapping[str, JsonScalar],
    max_attempts: int,
    decay: float,
    recall: RecallIndex | None = None,
) -> StateSnapshot:
    bounds = profile.bounds
    sections = set(contract.sections)
    state = merged_state(world_memory, npc_memory, derived)
    shown_state = tuple(sorted(state.items())) if Section.WORLD_STATE in sections else ()
    query = _query(context.said(), interaction_index, profile, sections, decay)
    all_exchanges, exchanges, memories, believed = _conversation_and_memories(
        npc_memory,
        bounds.max_exchanges if Section.EXCHANGES in sections else 0,
        scene_tag(context.scene_turn.scene_id, context.scene_turn.run) if context.scene_turn is not None else None,
    )
    episodes = retrieve_episodic(memories, query, recall, said=partial(said_in, profile.name))
    beliefs = retrieve_beliefs([b for b in npc_memory.beliefs if (b.id, b.content) not in believed], query)
    decided, claims = _offers(context, profile, constraints, state, world), world.state_claims if world else {}
    return StateSnapshot(
        npc_id=profile.id,
        npc_name=profile.name,
        persona=profile.persona,
        world_lore=world.lore if world else "",
        profile_hash=profile_hash,
        memory_hash=memory_hash,
        interaction_index=interaction_index,
        seed=seed,
        max_attempts=max_attempts,
        context=context,
        contract=contract,
        canonical=_FACTS.get(
            (world_memory.canonical, npc_memory.canonical, profile.allowed_intents),
            lambda: _facts(world_memory, npc_memory, profile),
        ),
        world_state=shown_state,
        derived_keys=tuple(sorted(k for k in derived if k in state)),
        state_claims=tuple((key, claims[key]) for key, _ in shown_state if key in claims),
        episodic=tuple(ScoredEpisode(entry=e, score=s) for e, s in episodes),
        episodic_available=len(memories),
        beliefs=tuple(ScoredBelief(belief=b, score=s) for b, s in beliefs),
        beliefs_available=len(npc_memory.beliefs),
        exchanges=exchanges,
        recent_replies=recent_replies(all_exchanges, profile.name, profile.output_limits.repeat_window),
        exchanges_held=len(all_exchanges),
        contradicted_beliefs=tuple(b.id for b in npc_memory.beliefs if b.contradicted),
        constraints=constraints,
        few_shot=profile.few_shot[: bounds.max_few_shot],
        secrets=tuple(sorted(profile.secrets, key=lambda x: x.id)),
        allowed_intents=tuple(sorted(profile.allowed_intents, key=lambda i: i.type)),
        **decided.snapshot_fields(),
        max_chars=bounds.max_chars,
        ungrounded_numbers=profile.ungrounded_numbers,
        output_limits=profile.output_limits,
    )
