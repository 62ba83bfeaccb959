"""The authoritative memory store: SQLite in WAL mode, one transaction per batch.

Durability: `synchronous=FULL` by default. In WAL mode that syncs the log on every commit, so a
batch the store reported as committed survives a killed process *and* a power cut; it costs
one fsync per commit, which is the disk's (0.25-0.45 ms on the development VM, measured with a
one-row commit; more when other work shares the disk). `Durability.NORMAL` (survives a killed
process, may lose the last commits on power loss) is available for tools that write in bulk.

The sidecar is the only writer. The store keeps every scope's memory in RAM as immutable
`ScopeMemory` values and swaps a scope's value only after its batch committed, so readers never
see half a batch.
"""

from __future__ import annotations

import bisect
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from loreguard.memory import audit_log, slots
from loreguard.memory.audit_log import AuditEntry
from loreguard.memory.entries import entry_key, kind_entries
from loreguard.memory.errors import (
    AuditWriteError,
    MemoryFileError,
    MemoryStoreError,
    StalePlanError,
    StoreClosedError,
    UnknownScopeError,
)
from loreguard.memory.hashing import (
    canonical_json,
    combine_scope_hashes,
    content_hash,
    entry_line,
    scope_hash_of,
    scope_hash_of_lines,
    scope_lines,
    scopes_hash,
    sha256_hex,
)
from loreguard.memory.policy import MemoryPolicy
from loreguard.memory.recall import RecallIndex
from loreguard.memory.schema import Transaction, migrate
from loreguard.memory.state import StoredState, read_state, replace_contents
from loreguard.memory.transitions import BatchPlan, RowChange, plan_batch
from loreguard.schemas.memory import (
    WORLD_SCOPE,
    AddCanonicalFact,
    Authority,
    BatchResult,
    MemoryKind,
    MemoryWrite,
    ScopeMemory,
    SetWorldState,
)
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.rules import BehaviourStats


class Durability(str, Enum):
    FULL = "FULL"
    NORMAL = "NORMAL"


@dataclass(frozen=True)
class StoreView:
    """One consistent read of everything an interaction reads from the store, taken under the
    store's lock so no concurrent batch can fall between its parts."""

    profile: NpcProfile
    profile_hash: str
    world: WorldDefinition | None
    world_hash: str | None
    npc: ScopeMemory
    world_memory: ScopeMemory
    interactions: int
    behaviour: dict[str, BehaviourStats]
    next_seq: int
    #: (scope, scope hash) for the NPC and the world, sorted by scope.
    scope_hashes: tuple[tuple[str, str], ...]
    #: Per scope: (kind, entry id) -> sha256 of the entry's canonical JSON (read-only).
    entry_digests: Mapping[str, Mapping[tuple[str, str], str]]
    #: The NPC's episodic memory indexed by keyword (read-only), for retrieval's relevance.
    recall: RecallIndex
    #: Other NPCs' scopes the interaction writes (those present in a scene, who hear its line),
    #: by scope; their hashes are in `scope_hashes` too.
    others: tuple[ScopeMemory, ...] = ()

    @property
    def memory_hash(self) -> str:
        return combine_scope_hashes(self.scope_hashes, next_seq=self.next_seq)

    @property
    def scopes_hash(self) -> str:
        """The NPC's and the world's contents alone (what governance reads), without the store's
        sequence counter, which another NPC's commit moves."""
        return scopes_hash(self.scope_hashes)


@dataclass(frozen=True)
class PlannedBatch:
    """A batch planned against the store's state as it is now: the writes, the memory hash they
    lead to and the audit log position the batch's record takes. Nothing is written until
    `MemoryStore.commit`, so a caller builds its reply and record between the two, outside any
    database lock."""

    plan: BatchPlan
    complete_interaction: str | None
    #: Hash of the scopes the caller named (`hash_scopes`) once this batch is applied.
    memory_hash_after: str
    #: Hash of the same scopes as they were when the batch was planned.
    memory_hash_before: str
    #: The store's next sequence number when the batch was planned (its first new entry's).
    next_seq_before: int
    #: Where this batch's audit record goes in the log, if it has one.
    audit_seq: int
    definitions: Mapping[str, str]
    digests: Mapping[str, dict[tuple[str, str], str]]
    #: Per changed scope: its hash text's sorted lines once the batch is applied.
    lines: Mapping[str, list[str]]
    scope_hashes: Mapping[str, str]
    #: The store's state version the plan was made against; a commit checks it.
    base_version: int

    @property
    def ok(self) -> bool:
        return self.plan.ok


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
    _behaviour: dict[str, BehaviourStats]
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
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        try:
            # Before WAL (which writes the header): a new file can then give freed pages back
            # piecemeal (`vacuum`); on an existing file this changes nothing.
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={durability.value}")
            migrate(self._db, self.path)
            state = read_state(self._db)
            next_audit_seq = audit_log.next_seq(self._db)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            self._db = None
            # A truncated or overwritten file: say so, and leave it as it is for the user to look at.
            raise MemoryFileError(f"{self.path} is not a readable Loreguard memory file ({exc}); nothing was changed") from None
        except MemoryStoreError:
            self._db.close()
            self._db = None
            raise
        self._counters: dict[str, int] = {}
        self._version = 0
        self._install(state)
        self._next_audit_seq = next_audit_seq

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreClosedError("the memory store is closed")
        return self._db

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
                behaviour=dict(self._behaviour),
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
        self, writes: Sequence[MemoryWrite], *, complete_interaction: str | None = None, hash_scopes: Iterable[str] = ()
    ) -> PlannedBatch:
        """Plan a batch against the current state (pure: nothing is written). Its
        `memory_hash_after` covers `hash_scopes`. A plan with refusals commits as a refusal."""
        with self._lock:
            if complete_interaction is not None:
                self.scope(complete_interaction)
            plan = plan_batch(self._scopes, writes, self._next_seq, self.policy)
            return self._planned(plan, complete_interaction=complete_interaction, hash_scopes=hash_scopes)

    def commit(self, planned: PlannedBatch, *, audit: AuditEntry | None = None) -> BatchResult:
        """Write a planned batch, and its audit record when given, in one short transaction.

        A record that cannot be written raises `AuditWriteError` and nothing changes. A plan
        made before another batch committed raises `StalePlanError`, and nothing changes.
        """
        with self._lock:
            if not planned.ok:
                return self._refuse(planned.plan)
            if planned.base_version != self._version:
                raise StalePlanError("memory changed after this batch was planned")
            self._commit(planned, audit=audit)
            return _result(planned.plan, audit_seq=planned.audit_seq if audit is not None else None)

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
            writes = [
                MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=profile.id, fact=fact))
                for fact in sorted(profile.canonical_facts, key=lambda f: f.id)  # ids in the listed order would vary
            ]
            plan = plan_batch(scopes, writes, self._next_seq, self.policy)
            if not plan.ok:
                return self._refuse(plan)
            if is_new and profile.id not in plan.scopes:
                plan = replace(plan, scopes={**plan.scopes, profile.id: ScopeMemory(scope=profile.id)})
            self._commit(self._planned(plan, definitions={profile.id: profile.model_dump_json()}))
            self._profiles[profile.id] = profile
            self._profile_hashes.pop(profile.id, None)
            return _result(plan)

    def load_world(self, world: WorldDefinition) -> BatchResult:
        """Designer registration of the world: lore facts, and initial state for keys the game
        has not set yet (a reload never rolls back game progress)."""
        with self._lock:
            current = self._scopes[WORLD_SCOPE]
            writes = [
                MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=WORLD_SCOPE, fact=fact))
                for fact in sorted(world.canonical_facts, key=lambda f: f.id)
            ]
            writes += [
                MemoryWrite(source=Authority.DESIGNER, op=SetWorldState(scope=WORLD_SCOPE, key=key, value=value))
                for key, value in sorted(world.initial_state.items())
                if current.state_value(key) is None
            ]
            plan = plan_batch(self._scopes, writes, self._next_seq, self.policy)
            if not plan.ok:
                return self._refuse(plan)
            self._commit(self._planned(plan, definitions={WORLD_SCOPE: world.model_dump_json()}))
            self._world = world
            self._world_hash = None
            return _result(plan)

    # --- behavioural rule feedback -------------------------------------------------------

    def behaviour_stats(self, rule_id: str) -> BehaviourStats:
        return self._behaviour.get(rule_id) or BehaviourStats(rule_id=rule_id)

    def all_behaviour_stats(self) -> dict[str, BehaviourStats]:
        return dict(self._behaviour)

    def record_correction(self, rule_id: str, verdict: int) -> BehaviourStats:
        """Designer feedback on a behavioural rule: +1 (it was right) or -1 (it was wrong)."""
        if verdict not in (1, -1):
            raise ValueError("verdict must be +1 or -1")
        with self._lock:
            old = self.behaviour_stats(rule_id)
            new = old.model_copy(update={"positive": old.positive + (verdict > 0), "negative": old.negative + (verdict < 0)})
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO behaviour(rule_id, positive, negative) VALUES (?, ?, ?) "
                    "ON CONFLICT(rule_id) DO UPDATE SET positive=excluded.positive, negative=excluded.negative",
                    (rule_id, new.positive, new.negative),
                )
            self._behaviour[rule_id] = new
            return new

    # --- save slots ----------------------------------------------------------------------

    def save(self, slot: str) -> str:
        """Copy all memory, profiles and counts into `slot` atomically. Returns the memory hash.
        The slot notes the audit log's position, so a retention prune keeps the records that
        led to it (`prune_audit`); the log itself is not copied."""
        with self._lock:
            digest = self.memory_hash()
            image = slots.image(self.db)
            with self._transaction() as db:
                slots.write(db, slot, image, digest, audit_seq=self._next_audit_seq - 1)
            return digest

    def load(self, slot: str) -> str:
        """Put the game's memory back as `slot` holds it, atomically, the next sequence number
        included: the store is then where it was when the slot was saved, and its next writes get
        the ids they got then. The current profiles, world definition and canonical facts stay
        (designer data is not the save's; see `slots`). Returns the memory hash."""
        with self._lock:
            with self._transaction() as db:
                loaded, digest = slots.restore(db, slot)
            self._install(loaded)
            return digest

    def slots(self) -> tuple[str, ...]:
        with self._lock:
            return slots.names(self.db)

    # --- internals -----------------------------------------------------------------------

    def _transaction(self) -> Transaction:
        return Transaction(self.db)

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
        self._behaviour = loaded.behaviour
        self._next_seq = loaded.next_seq
        self._version += 1

    def _planned(
        self,
        plan: BatchPlan,
        *,
        complete_interaction: str | None = None,
        definitions: Mapping[str, str] | None = None,
        hash_scopes: Iterable[str] = (),
    ) -> PlannedBatch:
        """The digests and hashes a plan leads to, computed before anything is written."""
        digests = {name: dict(self._entry_digests.get(name, {})) for name in plan.scopes}
        lines = {name: list(self._lines(name)) for name in plan.scopes}
        for change in plan.changes:
            entry_digests = digests.setdefault(change.scope, dict(self._entry_digests.get(change.scope, {})))
            sorted_lines = lines.setdefault(change.scope, list(self._lines(change.scope)))
            kind = change.kind.value
            old = entry_digests.get((kind, change.entry_id))
            if old is not None:
                _remove_line(sorted_lines, entry_line(kind, change.entry_id, old))
            if change.action == "upsert":
                digest = entry_digests[(kind, change.entry_id)] = sha256_hex(change.data)
                bisect.insort(sorted_lines, entry_line(kind, change.entry_id, digest))
            else:
                entry_digests.pop((kind, change.entry_id), None)
        scope_hashes = {name: scope_hash_of_lines(scope) for name, scope in lines.items()}
        names = sorted(set(hash_scopes))
        return PlannedBatch(
            plan=plan,
            complete_interaction=complete_interaction,
            memory_hash_after=combine_scope_hashes(
                ((name, scope_hashes.get(name) or self._scope_hash(name)) for name in names), next_seq=plan.next_seq
            ),
            memory_hash_before=combine_scope_hashes(((name, self._scope_hash(name)) for name in names), next_seq=self._next_seq),
            next_seq_before=self._next_seq,
            audit_seq=self._next_audit_seq,
            definitions=definitions or {},
            digests=digests,
            lines=lines,
            scope_hashes=scope_hashes,
            base_version=self._version,
        )

    def _commit(self, planned: PlannedBatch, *, audit: AuditEntry | None = None) -> None:
        """Write a planned batch (and its audit entry) in one transaction, then show it."""
        plan, complete_interaction = planned.plan, planned.complete_interaction
        with self._transaction() as db:
            for scope, definition in planned.definitions.items():
                db.execute(
                    "INSERT INTO scopes(scope, definition, interactions) VALUES (?, ?, 0) "
                    "ON CONFLICT(scope) DO UPDATE SET definition=excluded.definition",
                    (scope, definition),
                )
            try:
                _write_changes(db, plan.changes)
            except sqlite3.OperationalError as exc:
                if audit is None:
                    raise
                # The batch and its record go together: a disk that cannot take the batch cannot
                # take the record either, and the caller sees one failure for both.
                raise AuditWriteError(f"the interaction could not be written ({exc}); nothing was changed") from exc
            db.execute("UPDATE meta SET value = ? WHERE key = 'next_seq'", (plan.next_seq,))
            if complete_interaction is not None:
                db.execute("UPDATE scopes SET interactions = interactions + 1 WHERE scope = ?", (complete_interaction,))
            if audit is not None:
                audit_log.append(db, planned.audit_seq, audit)
        # Only after the commit succeeded does anyone see the new state.
        for name, memory in plan.scopes.items():
            index = self._recall.get(name)
            if index is not None:
                self._recall[name] = _recall_after(index, self._scopes.get(name), memory, plan.changes)
        self._scopes = {**self._scopes, **plan.scopes}
        self._entry_digests.update(planned.digests)
        self._scope_lines.update(planned.lines)
        self._scope_hashes.update(planned.scope_hashes)
        self._next_seq = plan.next_seq
        if complete_interaction is not None:
            self._interactions[complete_interaction] = self._interactions.get(complete_interaction, 0) + 1
        if audit is not None:
            self._next_audit_seq = planned.audit_seq + 1
        if plan.contradicted:
            self._counters["beliefs_contradicted"] = self._counters.get("beliefs_contradicted", 0) + len(plan.contradicted)
        self._version += 1

    # --- the audit log (storage in `audit_log`) ---------------------------------------------

    def audit_rows(
        self, *, npc_id: str | None = None, after: int = 0, last_seq: int | None = None, last: int | None = None
    ) -> list[tuple[int, str]]:
        """(seq, record JSON) rows in log order; see `audit_log.rows`."""
        with self._lock:
            return audit_log.rows(self.db, npc_id=npc_id, after=after, last_seq=last_seq, last=last)

    def audit_blobs(self, hashes: Iterable[str]) -> dict[str, str]:
        """The blobs with these hashes (those that exist)."""
        with self._lock:
            return audit_log.blobs(self.db, hashes)

    def audit_blob_hashes(self) -> set[str]:
        with self._lock:
            return audit_log.blob_hashes(self.db)

    def audit_doomed(self, keep_per_npc: int) -> dict[str, list[int]]:
        """Per NPC, the records a retention of `keep_per_npc` would prune: all but its newest,
        and never the record a save slot was saved after (see `prune_audit`)."""
        if keep_per_npc < 1:
            raise ValueError(f"audit retention must keep at least 1 record per NPC; got {keep_per_npc}")
        with self._lock:
            return audit_log.doomed(self.db, keep_per_npc, audit_log.pinned_by_slots(self.db))

    def prune_audit(self, seqs: Iterable[int]) -> tuple[int, int]:
        """Delete these audit records and every blob no remaining record needs, in one
        transaction; returns (records, blobs) deleted. Take `seqs` from `audit_doomed`, which
        keeps each NPC's newest records and the records save slots were saved after. Freed pages
        go back to the file system when they pass a quarter of the file."""
        with self._lock:
            with self._transaction() as db:
                deleted = audit_log.prune(db, seqs)
            (pages,) = self.db.execute("PRAGMA page_count").fetchone()
            (free,) = self.db.execute("PRAGMA freelist_count").fetchone()
            if free * 4 > pages:
                try:
                    self.vacuum()
                except sqlite3.OperationalError:
                    # A full disk: the pruned pages stay free inside the file, reused by the next
                    # writes, and the next prune tries again. Nothing is lost.
                    self._counters["vacuum_failed"] = self._counters.get("vacuum_failed", 0) + 1
            return deleted

    def vacuum(self) -> None:
        """Give the file's free pages back to the file system, where the file allows it piecemeal
        (files created since schema version 3). A full disk stops it with nothing lost; the next
        call goes on."""
        with self._lock:
            (mode,) = self.db.execute("PRAGMA auto_vacuum").fetchone()
            if mode == 2:  # INCREMENTAL
                self.db.execute("PRAGMA incremental_vacuum").fetchall()

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
    ) -> str:
        """Replace all memory with the given image, atomically (how a replay puts the store back
        where a recorded interaction started). Returns the memory hash."""
        names = sorted({s.scope for s in scopes} | {WORLD_SCOPE})
        definitions = {name: profiles[name].model_dump_json() for name in names if name in profiles}
        if world is not None:
            definitions[WORLD_SCOPE] = world.model_dump_json()
        scope_rows = [(name, definitions.get(name), interactions.get(name, 0)) for name in names]
        entry_rows = [
            (m.scope, kind.value, entry_key(entry), entry.seq, canonical_json(entry).decode("utf-8"))
            for m in scopes
            for kind, entry in kind_entries(m)
        ]
        behaviour_rows = [(b.rule_id, b.positive, b.negative) for b in behaviour]
        with self._lock:
            with self._transaction() as db:
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


_UPSERT_ENTRY = (
    "INSERT INTO entries(scope, kind, id, seq, data) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(scope, kind, id) DO UPDATE SET seq=excluded.seq, data=excluded.data"
)
_DELETE_ENTRY = "DELETE FROM entries WHERE scope = ? AND kind = ? AND id = ?"


def _write_changes(db: sqlite3.Connection, changes: Iterable[RowChange]) -> None:
    """Write a plan's row changes with one statement per action: only the last change to each
    row counts (an entry appended and pruned in one batch is never written), so the order
    between different rows does not matter."""
    last: dict[tuple[str, str, str], RowChange] = {}
    for change in changes:
        last[(change.scope, change.kind.value, change.entry_id)] = change
    upserts = [(*key, c.seq, c.data) for key, c in last.items() if c.action == "upsert"]
    deletes = [key for key, c in last.items() if c.action != "upsert"]
    if upserts:
        db.executemany(_UPSERT_ENTRY, upserts)
    if deletes:
        db.executemany(_DELETE_ENTRY, deletes)


def _recall_after(index: RecallIndex, old: ScopeMemory | None, new: ScopeMemory, changes: Iterable[RowChange]) -> RecallIndex:
    """The episodic index of `new`, derived from `old`'s by the batch's episodic row changes."""
    mine = [c for c in changes if c.scope == new.scope and c.kind is MemoryKind.EPISODIC]
    if not mine:
        return index
    # New entries have the highest sequence numbers: look for them from the end.
    added = []
    for entry in reversed(new.episodic):
        if entry.seq in index.words:
            break
        added.append(entry)
    deleted = {c.entry_id for c in mine if c.action == "delete"}
    removed = [e.seq for e in (old.episodic if old is not None and deleted else ()) if e.id in deleted]
    return index.changed(added=reversed(added), removed=removed)


def _remove_line(lines: list[str], line: str) -> None:
    """Remove `line` from the sorted `lines`, where it must stand."""
    at = bisect.bisect_left(lines, line)
    if at == len(lines) or lines[at] != line:
        raise AssertionError(f"a scope's hash lines lost {line!r}")  # digests and lines out of step: a bug
    del lines[at]


def _result(plan: BatchPlan, *, audit_seq: int | None = None) -> BatchResult:
    seq_range = (plan.first_seq, plan.last_seq) if plan.first_seq is not None and plan.last_seq is not None else None
    return BatchResult(
        committed=True, applied=plan.applied, seq_range=seq_range, audit_seq=audit_seq, contradicted=plan.contradicted
    )


__all__ = ["Durability", "MemoryStore", "PlannedBatch", "StoreView"]
