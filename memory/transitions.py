"""Pure state transitions: a batch of writes applied to memory, as a plan.

`plan_batch` never touches a database. It returns the new state of every scope it changed and
the row changes that persist it; `MemoryStore` commits those in one transaction. Because the
plan is a pure function of (state, writes, next sequence number), the same batch gives the same
memory everywhere.

A belief that contradicts a claim of a canonical fact (its own scope's or the world's) is marked
`contradicted` in the same plan, whichever came first: the belief is checked when it is written,
and every belief a new fact can reach is checked when the fact is added. Marking keeps the
belief's sequence number, so it shifts no id of the batch's other entries.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from typing import Any, Literal

from loreguard.memory.authority import check_identity, check_write
from loreguard.memory.claims import find_contradictions
from loreguard.memory.consolidation import keep_most_significant, oldest_block
from loreguard.memory.hashing import canonical_json
from loreguard.memory.policy import MemoryPolicy
from loreguard.memory.recall import RecallIndex
from loreguard.schemas.memory import (
    WORLD_SCOPE,
    AddCanonicalFact,
    AppendEpisodic,
    Authority,
    Belief,
    CanonicalFact,
    ContradictedBelief,
    EpisodicEntry,
    MemoryKind,
    MemoryWrite,
    RefusalCode,
    RemoveEntry,
    ScopeMemory,
    SetWorldState,
    StoredCanonicalFact,
    UpsertBelief,
    WorldStateEntry,
    WriteRefusal,
)


@dataclass(frozen=True)
class RowChange:
    """One row to write or delete: (scope, kind, id) identifies it."""

    action: Literal["upsert", "delete"]
    scope: str
    kind: MemoryKind
    entry_id: str
    seq: int = 0
    data: str = ""


@dataclass(frozen=True)
class BatchPlan:
    scopes: dict[str, ScopeMemory]
    changes: tuple[RowChange, ...]
    refusals: tuple[WriteRefusal, ...]
    next_seq: int
    applied: int
    first_seq: int | None = None
    last_seq: int | None = None
    #: Beliefs the batch marked contradicted, by scope, then belief id.
    contradicted: tuple[ContradictedBelief, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals


class _Scratch:
    """A scope being changed. Each kind's entries become a dict only when a write touches that
    kind; untouched kinds keep their original tuple."""

    def __init__(self, scope: ScopeMemory) -> None:
        self.scope = scope
        self._canonical: dict[str, StoredCanonicalFact] | None = None
        self._world_state: dict[str, WorldStateEntry] | None = None
        self._episodic: dict[str, EpisodicEntry] | None = None
        self._beliefs: dict[str, Belief] | None = None

    @property
    def canonical(self) -> dict[str, StoredCanonicalFact]:
        if self._canonical is None:
            self._canonical = {item.fact.id: item for item in self.scope.canonical}
        return self._canonical

    @property
    def world_state(self) -> dict[str, WorldStateEntry]:
        if self._world_state is None:
            self._world_state = {item.key: item for item in self.scope.world_state}
        return self._world_state

    @property
    def episodic(self) -> dict[str, EpisodicEntry]:
        if self._episodic is None:
            self._episodic = {item.id: item for item in self.scope.episodic}
        return self._episodic

    @property
    def beliefs(self) -> dict[str, Belief]:
        if self._beliefs is None:
            self._beliefs = {item.id: item for item in self.scope.beliefs}
        return self._beliefs

    def canonical_ids(self) -> Container[str]:
        return self._canonical if self._canonical is not None else self.scope.canonical_ids()

    def belief_ids(self) -> Container[str]:
        return self._beliefs if self._beliefs is not None else {item.id for item in self.scope.beliefs}

    def freeze(self) -> ScopeMemory:
        s = self.scope
        return ScopeMemory.model_construct(
            scope=s.scope,
            canonical=s.canonical if self._canonical is None else tuple(self._canonical[k] for k in sorted(self._canonical)),
            world_state=s.world_state
            if self._world_state is None
            else tuple(self._world_state[k] for k in sorted(self._world_state)),
            episodic=s.episodic if self._episodic is None else tuple(sorted(self._episodic.values(), key=_BY_SEQ)),
            beliefs=s.beliefs if self._beliefs is None else tuple(self._beliefs[k] for k in sorted(self._beliefs)),
        )


_BY_SEQ = attrgetter("seq")


def episodic_id(seq: int) -> str:
    return f"ep{seq}"


def plan_batch(
    state: Mapping[str, ScopeMemory],
    writes: Sequence[MemoryWrite],
    next_seq: int,
    policy: MemoryPolicy,
) -> BatchPlan:
    """Apply `writes` in order to `state` (scope -> memory; a scope missing from it is
    unknown). Later writes see earlier ones. Any refusal means the plan must not be committed;
    every refusal is still reported, so callers can count them all."""
    batch = _Batch(state, policy, next_seq)
    for index, write in enumerate(writes):
        outcome = _plan_write(batch, write)
        if isinstance(outcome, tuple):
            code, reason = outcome
            batch.refusals.append(WriteRefusal(index=index, op=write.op.op, scope=write.op.scope, code=code, reason=reason))
            continue
        if outcome is _Outcome.WROTE:
            if batch.first_seq is None:
                batch.first_seq = batch.seq
            batch.seq += 1
        batch.applied += 1

    contradicted: list[ContradictedBelief] = []
    if not batch.refusals:  # a refused plan is never committed: nothing to mark
        contradicted = _mark_contradicted(state, batch.scratch, batch.changes, batch.fact_scopes, batch.written_beliefs)
    return BatchPlan(
        scopes={name: work.freeze() for name, work in sorted(batch.scratch.items())},
        changes=tuple(batch.changes),
        refusals=tuple(batch.refusals),
        next_seq=batch.seq,
        applied=batch.applied,
        first_seq=batch.first_seq,
        last_seq=batch.seq - 1 if batch.first_seq is not None else None,
        contradicted=tuple(contradicted),
    )


class _Outcome(Enum):
    """What planning a write did, when it did not refuse it."""

    #: Wrote an entry at the batch's next sequence number, which then moves on.
    WROTE = "wrote"
    #: Applied without a new sequence number: a delete, or a fact registered again unchanged.
    APPLIED = "applied"


#: A write's outcome: done, or refused with (code, reason).
_Planned = _Outcome | tuple[RefusalCode, str]


@dataclass
class _Batch:
    """A batch being planned: the scopes its writes touched so far and everything they did."""

    state: Mapping[str, ScopeMemory]
    policy: MemoryPolicy
    #: The sequence number the next new entry takes.
    seq: int
    scratch: dict[str, _Scratch] = field(default_factory=dict)
    changes: list[RowChange] = field(default_factory=list)
    refusals: list[WriteRefusal] = field(default_factory=list)
    first_seq: int | None = None
    applied: int = 0
    #: Scopes that gained a canonical fact, and beliefs written, in this batch.
    fact_scopes: set[str] = field(default_factory=set)
    written_beliefs: set[tuple[str, str]] = field(default_factory=set)


def _plan_write(batch: _Batch, write: MemoryWrite) -> _Planned:
    """Check one write's authority and scope, then hand it to the handler of its op kind."""
    op = write.op
    refused = check_write(write.source, op)
    if refused is not None:
        return refused
    if op.scope not in batch.state:
        return RefusalCode.UNKNOWN_SCOPE, f"no NPC or world scope {op.scope!r} is registered"
    work = batch.scratch.get(op.scope)
    if work is None:
        work = batch.scratch[op.scope] = _Scratch(batch.state[op.scope])
    match op:
        case AddCanonicalFact():
            return _add_fact(batch, work, op)
        case SetWorldState():
            return _set_world_state(batch, work, op, write.source)
        case AppendEpisodic():
            return _append_episodic(batch, work, op, write.source)
        case UpsertBelief():
            return _upsert_belief(batch, work, op, write.source)
        case RemoveEntry():
            return _remove_entry(batch, work, op)
        case _:  # pragma: no cover - check_write has refused every other op already
            raise TypeError(f"unhandled write {type(op).__name__}")


def _add_fact(batch: _Batch, work: _Scratch, op: AddCanonicalFact) -> _Planned:
    existing = work.canonical.get(op.fact.id)
    if existing is not None:
        if existing.fact == op.fact:
            return _Outcome.APPLIED  # re-registering the same fact is a no-op, not an error
        return RefusalCode.DUPLICATE_ID, f"canonical fact {op.fact.id!r} already exists"
    clash = _identity(batch.state, batch.scratch, MemoryKind.CANONICAL, op.scope, op.fact.id)
    if clash is not None:
        return clash
    stored = StoredCanonicalFact(fact=op.fact, seq=batch.seq)
    work.canonical[op.fact.id] = stored
    batch.changes.append(_upsert(op.scope, MemoryKind.CANONICAL, op.fact.id, batch.seq, stored))
    batch.fact_scopes.add(op.scope)
    return _Outcome.WROTE


def _set_world_state(batch: _Batch, work: _Scratch, op: SetWorldState, source: Authority) -> _Planned:
    entry = WorldStateEntry(key=op.key, value=op.value, seq=batch.seq, source=source)
    work.world_state[op.key] = entry
    batch.changes.append(_upsert(op.scope, MemoryKind.WORLD_STATE, op.key, batch.seq, entry))
    return _Outcome.WROTE


def _append_episodic(batch: _Batch, work: _Scratch, op: AppendEpisodic, source: Authority) -> _Planned:
    episode = EpisodicEntry(
        id=episodic_id(batch.seq),
        seq=batch.seq,
        text=op.text,
        significance=op.significance,
        at_interaction=op.at_interaction,
        tags=op.tags,
        source=source,
        turn=op.turn,
    )
    work.episodic[episode.id] = episode
    batch.changes.append(_upsert(op.scope, MemoryKind.EPISODIC, episode.id, batch.seq, episode))
    batch.changes.extend(_prune_episodic(work, batch.policy))
    return _Outcome.WROTE


def _upsert_belief(batch: _Batch, work: _Scratch, op: UpsertBelief, source: Authority) -> _Planned:
    clash = _identity(batch.state, batch.scratch, MemoryKind.BELIEF, op.scope, op.belief_id)
    if clash is not None:
        return clash
    belief = Belief(
        id=op.belief_id,
        seq=batch.seq,
        content=op.content,
        confidence=op.confidence,
        sentiment=op.sentiment,
        contradicted=op.contradicted,
        source=source,
    )
    work.beliefs[op.belief_id] = belief
    batch.changes.append(_upsert(op.scope, MemoryKind.BELIEF, op.belief_id, batch.seq, belief))
    batch.written_beliefs.add((op.scope, op.belief_id))
    return _Outcome.WROTE


def _remove_entry(batch: _Batch, work: _Scratch, op: RemoveEntry) -> _Planned:
    tables: dict[MemoryKind, dict[str, Any]] = {
        MemoryKind.WORLD_STATE: work.world_state,
        MemoryKind.EPISODIC: work.episodic,
        MemoryKind.BELIEF: work.beliefs,
    }
    table = tables[op.kind]
    if op.entry_id not in table:
        return RefusalCode.NOT_FOUND, f"no {op.kind.value} entry {op.entry_id!r}"
    del table[op.entry_id]
    batch.changes.append(RowChange("delete", op.scope, op.kind, op.entry_id))
    return _Outcome.APPLIED


class _AnyOf:
    """Membership in any of several id containers, without copying them into one."""

    def __init__(self, parts: Iterable[Container[str]]) -> None:
        self._parts = tuple(parts)

    def __contains__(self, item: object) -> bool:
        return any(item in part for part in self._parts)


def _identity(
    state: Mapping[str, ScopeMemory], scratch: Mapping[str, _Scratch], kind: MemoryKind, scope: str, entry_id: str
) -> tuple[RefusalCode, str] | None:
    """`check_identity` for an entry about to be written to `scope`, against the batch's state
    so far: a belief sees its scope's and the world's facts; a world fact reaches every scope's
    beliefs, any other fact its own scope's."""

    def current(name: str) -> ScopeMemory | _Scratch:
        return scratch.get(name) or state[name]

    if kind is MemoryKind.BELIEF:
        seen = sorted({scope, WORLD_SCOPE} & state.keys())
        return check_identity(kind, entry_id, canonical_ids=_AnyOf(current(n).canonical_ids() for n in seen), belief_ids=())
    reached = sorted(state) if scope == WORLD_SCOPE else [scope]
    return check_identity(kind, entry_id, canonical_ids=(), belief_ids=_AnyOf(_belief_ids(current(n)) for n in reached))


def _belief_ids(holder: ScopeMemory | _Scratch) -> Container[str]:
    return holder.belief_ids() if isinstance(holder, _Scratch) else {item.id for item in holder.beliefs}


def identity_clashes(state: Mapping[str, ScopeMemory]) -> tuple[str, ...]:
    """Every belief in `state` that has the id of a canonical fact it can see, as
    `scope/belief id` (by scope, then id): the whole-state form of the check each write makes,
    for state that arrives whole (a save slot)."""
    world = state[WORLD_SCOPE].canonical_ids() if WORLD_SCOPE in state else frozenset()
    clashes = []
    for name in sorted(state):
        facts = _AnyOf((state[name].canonical_ids(), world))
        for belief in state[name].beliefs:
            if check_identity(MemoryKind.BELIEF, belief.id, canonical_ids=facts, belief_ids=()) is not None:
                clashes.append(f"{name}/{belief.id}")
    return tuple(clashes)


def _mark_contradicted(
    state: Mapping[str, ScopeMemory],
    scratch: dict[str, _Scratch],
    changes: list[RowChange],
    fact_scopes: set[str],
    written_beliefs: set[tuple[str, str]],
) -> list[ContradictedBelief]:
    """Mark every belief the batch put within reach of a contradicting claim: beliefs it wrote,
    and all beliefs of a scope whose facts it extended (the world's facts reach every scope).
    Facts are never removed, so a mark is never lifted here; rewriting the belief lifts it."""

    def current(name: str) -> ScopeMemory | _Scratch:
        return scratch.get(name) or state[name]

    def facts_of(name: str) -> tuple[CanonicalFact, ...]:
        holder = current(name)
        stored = holder.canonical.values() if isinstance(holder, _Scratch) else holder.canonical
        return tuple(item.fact for item in sorted(stored, key=lambda item: item.fact.id) if item.fact.claims)

    if WORLD_SCOPE in fact_scopes:
        reach = set(state)
    else:
        reach = fact_scopes | {scope for scope, _ in written_beliefs}
    world_facts = facts_of(WORLD_SCOPE) if WORLD_SCOPE in state else ()
    marked: list[ContradictedBelief] = []
    for name in sorted(reach):
        recheck_all = name in fact_scopes or WORLD_SCOPE in fact_scopes
        facts = world_facts + (facts_of(name) if name != WORLD_SCOPE else ())
        if not facts:
            continue
        holder = current(name)
        beliefs = holder.beliefs.values() if isinstance(holder, _Scratch) else holder.beliefs
        for belief in sorted(beliefs, key=lambda b: b.id):
            if belief.contradicted or not (recheck_all or (name, belief.id) in written_beliefs):
                continue
            hits = find_contradictions(belief.content, facts)
            if not hits:
                continue
            work = scratch.get(name)
            if work is None:
                work = scratch[name] = _Scratch(state[name])
            flagged = belief.model_copy(update={"contradicted": True})
            work.beliefs[belief.id] = flagged
            # One row per entry: a belief written by this batch is replaced, not written twice.
            changes[:] = [c for c in changes if (c.scope, c.kind, c.entry_id) != (name, MemoryKind.BELIEF, belief.id)]
            changes.append(_upsert(name, MemoryKind.BELIEF, belief.id, belief.seq, flagged))
            marked.append(ContradictedBelief(scope=name, belief_id=belief.id, fact_id=hits[0].fact_id))
    return marked


def _upsert(scope: str, kind: MemoryKind, entry_id: str, seq: int, model: object) -> RowChange:
    return RowChange("upsert", scope, kind, entry_id, seq, canonical_json(model).decode("utf-8"))


def _prune_episodic(work: _Scratch, policy: MemoryPolicy) -> list[RowChange]:
    """Past the limit, consolidate the oldest entries (`consolidation`): the most significant of
    them stay, the rest are deleted. Deterministic: content decides, never write order."""
    if len(work.episodic) <= policy.episodic_limit:
        return []
    entries = list(work.episodic.values())
    excess = len(entries) - policy.episodic_limit
    block = oldest_block(entries, max(policy.consolidation_block, excess))
    keep = min(policy.consolidation_keep, len(block) - excess)  # never above the limit after
    _, doomed = keep_most_significant(block, keep, RecallIndex.of(entries))
    dropped = []
    for entry in doomed:
        del work.episodic[entry.id]
        dropped.append(RowChange("delete", work.scope.scope, MemoryKind.EPISODIC, entry.id))
    return dropped
