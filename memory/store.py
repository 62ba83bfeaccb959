"""The authoritative memory store: SQLite in WAL mode, one transaction per batch.

Durability: `synchronous=FULL` by default. In WAL mode that syncs the log on every commit, so a
batch the store reported as committed survives a killed process *and* a power cut; it costs
one fsync per commit, which is the disk's (0.25-0.45 ms on the development VM, measured with a
one-row commit; more when other work shares the disk). `Durability.NORMAL` (survives a killed
process, may lose the last commits on power loss) is available for tools that write in bulk.

The sidecar is the only writer. The store keeps every scope's memory in RAM as immutable
`ScopeMemory` values and swaps a scope's value only after its batch committed, so readers never
see half a batch.

The store is made of parts that share the file's connection and lock (`database.MemoryFile`):
`store.audit` (the audit log), `store.slots` (save slots) and `store.behaviour` (rule feedback).
The store itself plans batches (`transitions`), works out their hashes and writes them
(`batch`), and keeps the in-RAM state readers see.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from loreguard.memory.audit_log import AuditEntry, AuditLog
from loreguard.memory.batch import PlannedBatch, batch_result, digests_after, recall_after, write_batch
from loreguard.memory.behaviour import BehaviourFeedback
from loreguard.memory.database import Durability, MemoryFile
from loreguard.memory.entries import entry_key, kind_entries
from loreguard.memory.errors import StalePlanError, UnknownScopeError
from loreguard.memory.hashing import (
    canonical_json,
    combine_scope_hashes,
    content_hash,
    scope_hash_of,
    scope_hash_of_lines,
    scope_lines,
)
from loreguard.memory.policy import MemoryPolicy
from loreguard.memory.recall import RecallIndex
from loreguard.memory.registration import profile_writes, world_writes
from loreguard.memory.slots import SaveSlots
from loreguard.memory.state import StoredState, read_state, replace_contents
from loreguard.memory.transitions import BatchPlan, plan_batch
from loreguard.memory.view import StoreView
from loreguard.schemas.memory import WORLD_SCOPE, BatchResult, MemoryWrite, ScopeMemory
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.rules import BehaviourStats


class MemoryStore:
    """Authoritative memory for one world and its NPCs, persisted in one SQLite file."""

    # The in-RAM view of the database, replaced whole by `_install` (open, slot load, replace_all).
    _scopes: dict[str, ScopeMemory]
    _entry_digests: dict[str, dict[tuple[str, str], str]]
    _scope_hashes: dict[str, str]
    #: Per scope: the sorted lines its hash covers (`hashing.scope_lines`), made on first use and
    #: kept in step with `_entry_digests` by every commit.
    _scope_lines: dict[str, list[str]]
    #: Per scope: its episodic entries indexed by keyword (`recall`), made on first use.
    _recall: dict[str, RecallIndex]
    _profiles: dict[str, NpcProfile]
    _profile_hashes: dict[str, str]
    _world: WorldDefinition | None
    _world_hash: str | None
    _interactions: dict[str, int]
    _last_fallback: dict[str, str]
    _next_seq: int

    def __init__(
        self,
        path: str | Path,
        *,
        policy: MemoryPolicy | None = None,
        durability: Durability = Durability.FULL,
    ) -> None:
        self.path = Path(path)
        self.policy = policy or MemoryPolicy()
        self._counters: dict[str, int] = {}
        self._file = MemoryFile(self.path, durability, self._counters)
        self._lock = self._file.lock
        self._version = 0
        #: Designer feedback on behavioural rules (`behaviour`).
        self.behaviour = BehaviourFeedback(self._file)
        with self._file.opening() as db:
            state = read_state(db)
            #: The audit log's records, blobs and retention prune (`audit_log`).
            self.audit = AuditLog(self._file, self._counters)
        #: Save slots (`slots`).
        self.slots = SaveSlots(self._file, self.audit, memory_hash=self.memory_hash, install=self._install)
        self._install(state)

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        """The memory file's connection (`StoreClosedError` once closed)."""
        return self._file.db

    # --- reads ---------------------------------------------------------------------------

    def scope(self, scope: str) -> ScopeMemory:
        """The current memory of an NPC (or of `WORLD_SCOPE`)."""
        try:
            return self._scopes[scope]
        except KeyError:
            raise UnknownScopeError(f"no NPC {scope!r} is registered") from None

    def npc_ids(self) -> tuple[str, ...]:
        return tuple(sorted(s for s in self._scopes if s != WORLD_SCOPE))

    def profile(self, npc_id: str) -> NpcProfile:
        try:
            return self._profiles[npc_id]
        except KeyError:
            raise UnknownScopeError(f"no NPC {npc_id!r} is registered") from None

    def profile_hash(self, npc_id: str) -> str:
        """Content hash of the registered profile (changes when the designer changes it)."""
        self.profile(npc_id)
        digest = self._profile_hashes.get(npc_id)
        if digest is None:
            digest = self._profile_hashes[npc_id] = content_hash(self._profiles[npc_id])
        return digest

    def world(self) -> WorldDefinition | None:
        return self._world

    def interactions(self, npc_id: str) -> int:
        """How many interactions this NPC has completed (the sidecar's own count)."""
        self.scope(npc_id)
        return self._interactions.get(npc_id, 0)

    def last_fallback(self, npc_id: str) -> str | None:
        """The last fallback line this NPC spoke (None: none yet); its next fallback passes over it."""
        self.scope(npc_id)
        return self._last_fallback.get(npc_id)

    def view(self, npc_id: str, also: Iterable[str] = ()) -> StoreView:
        """Everything an interaction for `npc_id` reads, as one consistent snapshot; with `also`,
        the scopes of other NPCs it writes to (a scene's listeners). `UnknownScopeError` for
        any NPC not registered."""
        with self._lock:
            profile = self.profile(npc_id)
            others = sorted(set(also) - {npc_id})
            for name in others:
                if name not in self._scopes:  # a replay restores listeners' memory, not their profiles
                    raise UnknownScopeError(f"no NPC {name!r} is registered")
            names = tuple(sorted((npc_id, WORLD_SCOPE, *others)))
            hashes = tuple((name, self._scope_hash(name)) for name in names)
            return StoreView(
                profile=profile,
                profile_hash=self.profile_hash(npc_id),
                world=self._world,
                world_hash=self.world_hash(),
                npc=self._scopes[npc_id],
                world_memory=self._scopes[WORLD_SCOPE],
                interactions=self._interactions.get(npc_id, 0),
                last_fallback=self._last_fallback.get(npc_id),
                behaviour=self.behaviour.all_stats(),
                next_seq=self._next_seq,
                scope_hashes=hashes,
                # Safe to share: a scope's digest map is replaced on commit, never changed in place.
                entry_digests={name: self._entry_digests.get(name, {}) for name in names},
                recall=self._recall_index(npc_id),
                others=tuple(self._scopes[name] for name in others),
            )

    def world_hash(self) -> str | None:
        """Content hash of the loaded world definition, or None before `load_world`."""
        if self._world is None:
            return None
        if self._world_hash is None:
            self._world_hash = content_hash(self._world)
        return self._world_hash

    def memory_hash(self, scopes: Iterable[str] | None = None) -> str:
        """The memory hash of the given scopes (default: all of them)."""
        names = sorted(self._scopes) if scopes is None else sorted(set(scopes))
        return combine_scope_hashes(((name, self._scope_hash(name)) for name in names), next_seq=self._next_seq)

    @property
    def next_seq(self) -> int:
        """The sequence number the next entry gets (the next episodic entry is `ep<next_seq>`);
        part of every memory hash."""
        return self._next_seq

    def _lines(self, name: str) -> list[str]:
        """The scope's sorted hash lines as committed (shared: copy before changing)."""
        lines = self._scope_lines.get(name)
        if lines is None:
            lines = self._scope_lines[name] = scope_lines(self._entry_digests.get(name, {}))
        return lines

    def _recall_index(self, name: str) -> RecallIndex:
        """The scope's episodic index, built on first use and then kept in step by every commit."""
        index = self._recall.get(name)
        if index is None:
            index = self._recall[name] = RecallIndex.of(self._scopes[name].episodic)
        return index

    def _scope_hash(self, name: str) -> str:
        self.scope(name)
        digest = self._scope_hashes.get(name)
        if digest is None:
            digest = self._scope_hashes[name] = scope_hash_of(self._entry_digests.get(name, {}))
        return digest

    @property
    def counters(self) -> dict[str, int]:
        """Refused writes by code (`refused.authority`, ...), blocked batches, and beliefs marked
        contradicted by a canonical fact (`beliefs_contradicted`)."""
        with self._lock:
            return dict(sorted(self._counters.items()))

    # --- writes --------------------------------------------------------------------------

    def apply(self, writes: Sequence[MemoryWrite], *, complete_interaction: str | None = None) -> BatchResult:
        """Apply a batch in one transaction: all of it, or (with any refusal) none of it.

        `complete_interaction` names an NPC whose interaction count advances in the same
        transaction; the count is bookkeeping, not memory, and is outside the memory hash.
        """
        with self._lock:
            return self.commit(self.plan(writes, complete_interaction=complete_interaction))

    def plan(
        self,
        writes: Sequence[MemoryWrite],
        *,
        complete_interaction: str | None = None,
        hash_scopes: Iterable[str] = (),
        fallback_line: str | None = None,
    ) -> PlannedBatch:
        """Plan a batch against the current state (pure: nothing is written). Its
        `memory_hash_after` covers `hash_scopes`. A plan with refusals commits as a refusal.
        `fallback_line`: the line `complete_interaction`'s NPC spoke as a fallback, kept as its
        last (`last_fallback`), outside the memory hash like the count."""
        with self._lock:
            if complete_interaction is not None:
                self.scope(complete_interaction)
            plan = plan_batch(self._scopes, writes, self._next_seq, self.policy)
            return self._planned(
                plan, complete_interaction=complete_interaction, fallback_line=fallback_line, hash_scopes=hash_scopes
            )

    def commit(self, planned: PlannedBatch, *, audit: AuditEntry | None = None) -> BatchResult:
        """Write a planned batch, and its audit record when given, in one short transaction.

        A record that cannot be written raises `AuditWriteError` (a `StorageUnavailableError`) and nothing changes. A plan
        made before another batch committed raises `StalePlanError`, and nothing changes.
        """
        with self._lock:
            if not planned.ok:
                return self._refuse(planned.plan)
            if planned.base_version != self._version:
                raise StalePlanError("memory changed after this batch was planned")
            self._commit(planned, audit=audit)
            return batch_result(planned.plan, audit_seq=planned.audit_seq if audit is not None else None)

    def register_npc(self, profile: NpcProfile) -> BatchResult:
        """Designer registration: the profile and its canonical facts, in one transaction.

        Registering the same profile again is a no-op; a changed persona or rule set replaces
        the stored profile; a canonical fact whose content changed is refused (facts are
        immutable), and then nothing changes.
        """
        with self._lock:
            scopes = dict(self._scopes)
            is_new = profile.id not in scopes
            if is_new:
                scopes[profile.id] = ScopeMemory(scope=profile.id)
            plan = plan_batch(scopes, profile_writes(profile), self._next_seq, self.policy)
            if not plan.ok:
                return self._refuse(plan)
            if is_new and profile.id not in plan.scopes:
                plan = replace(plan, scopes={**plan.scopes, profile.id: ScopeMemory(scope=profile.id)})
            self._commit(self._planned(plan, definitions={profile.id: profile.model_dump_json()}))
            self._profiles[profile.id] = profile
            self._profile_hashes.pop(profile.id, None)
            return batch_result(plan)

    def load_world(self, world: WorldDefinition) -> BatchResult:
        """Designer registration of the world: lore facts, and initial state for keys the game
        has not set yet (a reload never rolls back game progress)."""
        with self._lock:
            writes = world_writes(world, self._scopes[WORLD_SCOPE])
            plan = plan_batch(self._scopes, writes, self._next_seq, self.policy)
            if not plan.ok:
                return self._refuse(plan)
            self._commit(self._planned(plan, definitions={WORLD_SCOPE: world.model_dump_json()}))
            self._world = world
            self._world_hash = None
            return batch_result(plan)

    # --- internals -----------------------------------------------------------------------

    def _install(self, loaded: StoredState) -> None:
        """Make a freshly read database state the store's view."""
        self._scopes = loaded.scopes
        self._entry_digests = loaded.entry_digests
        self._scope_hashes = {}
        self._scope_lines = {}
        self._recall = {}
        self._profiles = loaded.profiles
        self._profile_hashes = {}
        self._world = loaded.world
        self._world_hash = None
        self._interactions = loaded.interactions
        self._last_fallback = loaded.last_fallback
        self.behaviour.reset(loaded.behaviour)
        self._next_seq = loaded.next_seq
        self._version += 1

    def _planned(
        self,
        plan: BatchPlan,
        *,
        complete_interaction: str | None = None,
        fallback_line: str | None = None,
        definitions: Mapping[str, str] | None = None,
        hash_scopes: Iterable[str] = (),
    ) -> PlannedBatch:
        """The digests and hashes a plan leads to, computed before anything is written."""
        digests, lines = digests_after(plan, self._entry_digests, self._lines)
        scope_hashes = {name: scope_hash_of_lines(scope) for name, scope in lines.items()}
        names = sorted(set(hash_scopes))
        return PlannedBatch(
            plan=plan,
            complete_interaction=complete_interaction,
            fallback_line=fallback_line,
            memory_hash_after=combine_scope_hashes(
                ((name, scope_hashes.get(name) or self._scope_hash(name)) for name in names), next_seq=plan.next_seq
            ),
            memory_hash_before=combine_scope_hashes(((name, self._scope_hash(name)) for name in names), next_seq=self._next_seq),
            next_seq_before=self._next_seq,
            audit_seq=self.audit.next_seq,
            definitions=definitions or {},
            digests=digests,
            lines=lines,
            scope_hashes=scope_hashes,
            base_version=self._version,
        )

    def _commit(self, planned: PlannedBatch, *, audit: AuditEntry | None = None) -> None:
        """Write a planned batch (and its audit entry) in one transaction, then show it."""
        plan, complete_interaction = planned.plan, planned.complete_interaction
        with self._file.transaction() as db:
            write_batch(db, planned, audit)
        # Only after the commit succeeded does anyone see the new state.
        for name, memory in plan.scopes.items():
            index = self._recall.get(name)
            if index is not None:
                self._recall[name] = recall_after(index, self._scopes.get(name), memory, plan.changes)
        self._scopes = {**self._scopes, **plan.scopes}
        self._entry_digests.update(planned.digests)
        self._scope_lines.update(planned.lines)
        self._scope_hashes.update(planned.scope_hashes)
        self._next_seq = plan.next_seq
        if complete_interaction is not None:
            self._interactions[complete_interaction] = self._interactions.get(complete_interaction, 0) + 1
            if planned.fallback_line is not None:
                self._last_fallback[complete_interaction] = planned.fallback_line
        if audit is not None:
            self.audit.next_seq = planned.audit_seq + 1
        if plan.contradicted:
            self._counters["beliefs_contradicted"] = self._counters.get("beliefs_contradicted", 0) + len(plan.contradicted)
        self._version += 1

    # --- replay support --------------------------------------------------------------------

    def replace_all(
        self,
        *,
        scopes: Sequence[ScopeMemory],
        profiles: Mapping[str, NpcProfile],
        world: WorldDefinition | None,
        interactions: Mapping[str, int],
        behaviour: Sequence[BehaviourStats],
        next_seq: int,
        last_fallback: Mapping[str, str | None] | None = None,
    ) -> str:
        """Replace all memory with the given image, atomically (how a replay puts the store back
        where a recorded interaction started). Returns the memory hash."""
        names = sorted({s.scope for s in scopes} | {WORLD_SCOPE})
        definitions = {name: profiles[name].model_dump_json() for name in names if name in profiles}
        if world is not None:
            definitions[WORLD_SCOPE] = world.model_dump_json()
        last = last_fallback or {}
        scope_rows = [(name, definitions.get(name), interactions.get(name, 0), last.get(name)) for name in names]
        entry_rows = [
            (m.scope, kind.value, entry_key(entry), entry.seq, canonical_json(entry).decode("utf-8"))
            for m in scopes
            for kind, entry in kind_entries(m)
        ]
        behaviour_rows = [(b.rule_id, b.positive, b.negative) for b in behaviour]
        with self._lock:
            with self._file.transaction() as db:
                loaded = replace_contents(db, scope_rows, entry_rows, behaviour_rows, next_seq)
            self._install(loaded)
            return self.memory_hash()

    def _refuse(self, plan: BatchPlan) -> BatchResult:
        """Count a refused batch and its refusals; nothing was written."""
        self._counters["batches_refused"] = self._counters.get("batches_refused", 0) + 1
        for refusal in plan.refusals:
            key = f"refused.{refusal.code.value}"
            self._counters[key] = self._counters.get(key, 0) + 1
        return BatchResult(committed=False, applied=0, refusals=plan.refusals)


__all__ = ["Durability", "MemoryStore", "PlannedBatch", "StoreView"]
