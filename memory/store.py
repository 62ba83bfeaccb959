"""The authoritative memory store: SQLite in WAL mode, one transaction per batch.

Durability: `synchronous=FULL` by default. In WAL mode that syncs the log on every commit, so a
batch the store reported as committed survives a killed process *and* a power cut; it costs
about 0.1 ms per commit here. `Durability.NORMAL` (survives a killed process, may lose the last
commits on power loss) is available for tools that write in bulk.

The sidecar is the only writer. The store keeps every scope's memory in RAM as immutable
`ScopeMemory` values and swaps a scope's value only after its batch committed, so readers never
see half a batch.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from loreguard.memory.errors import (
    AuditWriteError,
    SchemaVersionError,
    SlotCorruptError,
    SlotNotFoundError,
    StoreClosedError,
    UnknownScopeError,
)
from loreguard.memory.hashing import canonical_json, content_hash, sha256_hex
from loreguard.memory.policy import MemoryPolicy
from loreguard.memory.transitions import BatchPlan, RowChange, plan_batch
from loreguard.schemas.memory import (
    WORLD_SCOPE,
    AddCanonicalFact,
    Authority,
    BatchResult,
    Belief,
    EpisodicEntry,
    MemoryKind,
    MemoryWrite,
    ScopeMemory,
    SetWorldState,
    StoredCanonicalFact,
    WorldStateEntry,
)
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.rules import BehaviourStats

SCHEMA_VERSION = 2

_SCHEMA_V1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE scopes (
    scope TEXT PRIMARY KEY,
    definition TEXT,
    interactions INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE entries (
    scope TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (scope, kind, id)
);
CREATE TABLE behaviour (rule_id TEXT PRIMARY KEY, positive INTEGER NOT NULL, negative INTEGER NOT NULL);
CREATE TABLE slots (name TEXT PRIMARY KEY, image TEXT NOT NULL, memory_hash TEXT NOT NULL);
"""

# The audit log lives in the memory file on purpose: a record is written in the same transaction
# as the memory batch it describes, so there is never a state change without its record.
# Triggers make both tables append-only, whoever opens the file.
_APPEND_ONLY = "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
_AUDIT_V2 = (
    "CREATE TABLE audit (seq INTEGER PRIMARY KEY, npc_id TEXT NOT NULL, record TEXT NOT NULL)",
    "CREATE INDEX audit_by_npc ON audit (npc_id, seq)",
    "CREATE TABLE audit_blobs (hash TEXT PRIMARY KEY, data TEXT NOT NULL)",
    *(
        f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} {_APPEND_ONLY}"
        for table in ("audit", "audit_blobs")
        for action in ("UPDATE", "DELETE")
    ),
)


def _add_audit_log(db: sqlite3.Connection) -> None:
    for statement in _AUDIT_V2:
        db.execute(statement)


#: Migration hook: MIGRATIONS[n] upgrades a database from version n to n + 1, inside the
#: transaction that also records the new version.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_audit_log}

_ENTRY_MODELS = {
    MemoryKind.CANONICAL: StoredCanonicalFact,
    MemoryKind.WORLD_STATE: WorldStateEntry,
    MemoryKind.EPISODIC: EpisodicEntry,
    MemoryKind.BELIEF: Belief,
}


class Durability(str, Enum):
    FULL = "FULL"
    NORMAL = "NORMAL"


def _entry_key(kind: MemoryKind, entry: object) -> str:
    if kind is MemoryKind.CANONICAL:
        return entry.fact.id  # type: ignore[attr-defined]
    if kind is MemoryKind.WORLD_STATE:
        return entry.key  # type: ignore[attr-defined]
    return entry.id  # type: ignore[attr-defined]


def _scope_entries(scope: ScopeMemory) -> Iterable[tuple[MemoryKind, object]]:
    for kind, entries in (
        (MemoryKind.CANONICAL, scope.canonical),
        (MemoryKind.WORLD_STATE, scope.world_state),
        (MemoryKind.EPISODIC, scope.episodic),
        (MemoryKind.BELIEF, scope.beliefs),
    ):
        for entry in entries:
            yield kind, entry


def scope_entries(scope: ScopeMemory) -> Iterable[tuple[MemoryKind, str, object]]:
    """(kind, entry id, entry) for every entry of a scope."""
    for kind, entry in _scope_entries(scope):
        yield kind, _entry_key(kind, entry), entry


def build_scope(name: str, entries: Iterable[tuple[MemoryKind, object]]) -> ScopeMemory:
    """A scope from (kind, entry as JSON value) pairs, each list in its documented order."""
    parts: dict[MemoryKind, list] = {kind: [] for kind in MemoryKind}
    for kind, value in entries:
        parts[kind].append(_ENTRY_MODELS[kind].model_validate(value))
    return _sorted_scope(name, parts)


def _sorted_scope(name: str, parts: dict[MemoryKind, list]) -> ScopeMemory:
    return ScopeMemory(
        scope=name,
        canonical=tuple(sorted(parts[MemoryKind.CANONICAL], key=lambda c: c.fact.id)),
        world_state=tuple(sorted(parts[MemoryKind.WORLD_STATE], key=lambda w: w.key)),
        episodic=tuple(sorted(parts[MemoryKind.EPISODIC], key=lambda e: e.seq)),
        beliefs=tuple(sorted(parts[MemoryKind.BELIEF], key=lambda b: b.id)),
    )


def _combine_entry_digests(digests: Iterable[tuple[str, str, str]]) -> str:
    # One line per entry; kinds, ids and keys cannot contain tabs or newlines, so this text is
    # an unambiguous canonical form.
    return sha256_hex("\n".join(sorted(f"{kind}\t{key}\t{digest}" for kind, key, digest in digests)))


def scope_hash(scope: ScopeMemory) -> str:
    """sha256 over one scope's entries: each entry's canonical serialization is hashed, and the
    sorted (kind, id, entry hash) triples are hashed again. Incremental by design: the store
    re-hashes only the entries a batch wrote."""
    return _combine_entry_digests(
        (kind.value, _entry_key(kind, entry), sha256_hex(canonical_json(entry))) for kind, entry in _scope_entries(scope)
    )


def combine_scope_hashes(hashes: Iterable[tuple[str, str]]) -> str:
    """The memory hash of several scopes from their (name, scope hash) pairs."""
    return sha256_hex("\n".join(sorted(f"{name}\t{digest}" for name, digest in hashes)))


def memory_hash(scopes: Iterable[ScopeMemory]) -> str:
    """sha256 over the scopes' canonical serializations, ordered by scope name; equal on every
    machine and in every process for equal memory."""
    return combine_scope_hashes((s.scope, scope_hash(s)) for s in scopes)


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

    @property
    def memory_hash(self) -> str:
        return combine_scope_hashes(self.scope_hashes)


@dataclass(frozen=True)
class AuditEntry:
    """One audit-log row and the content-addressed blobs it names (JSON text)."""

    npc_id: str
    record: str
    blobs: Mapping[str, str]


#: Builds the audit entry inside the batch's transaction, from the log position it gets and
#: the memory hash the batch leads to (a function of the scope names to hash).
AuditWriter = Callable[[int, Callable[[Iterable[str]], str]], AuditEntry]


class MemoryStore:
    """Authoritative memory for one world and its NPCs, persisted in one SQLite file."""

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
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={durability.value}")
        self._migrate()
        self._counters: dict[str, int] = {}
        self._install(_read_state(self._db))

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

    def view(self, npc_id: str) -> StoreView:
        """Everything an interaction for `npc_id` reads, as one consistent snapshot."""
        with self._lock:
            profile = self.profile(npc_id)
            names = tuple(sorted((npc_id, WORLD_SCOPE)))
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
        return combine_scope_hashes((name, self._scope_hash(name)) for name in names)

    def _scope_hash(self, name: str) -> str:
        self.scope(name)
        digest = self._scope_hashes.get(name)
        if digest is None:
            entries = self._entry_digests.get(name, {})
            digest = _combine_entry_digests((kind, key, d) for (kind, key), d in entries.items())
            self._scope_hashes[name] = digest
        return digest

    @property
    def counters(self) -> dict[str, int]:
        """Refused writes by code (`refused.authority`, ...), and blocked batches."""
        with self._lock:
            return dict(sorted(self._counters.items()))

    # --- writes --------------------------------------------------------------------------

    def apply(
        self,
        writes: Sequence[MemoryWrite],
        *,
        complete_interaction: str | None = None,
        audit: AuditWriter | None = None,
    ) -> BatchResult:
        """Apply a batch in one transaction: all of it, or (with any refusal) none of it.

        `complete_interaction` names an NPC whose interaction count advances in the same
        transaction; the count is bookkeeping, not memory, and is outside the memory hash.
        `audit` writes the batch's audit record in that transaction too; if the record cannot
        be written, `AuditWriteError` is raised and nothing changed.
        """
        with self._lock:
            if complete_interaction is not None:
                self.scope(complete_interaction)
            plan = plan_batch(self._scopes, writes, self._next_seq, self.policy)
            if not plan.ok:
                self._count_refusals(plan)
                return BatchResult(committed=False, applied=0, refusals=plan.refusals)
            seq = self._commit(plan, complete_interaction=complete_interaction, audit=audit)
            return _result(plan, audit_seq=seq)

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
                for fact in profile.canonical_facts
            ]
            plan = plan_batch(scopes, writes, self._next_seq, self.policy)
            if not plan.ok:
                self._count_refusals(plan)
                return BatchResult(committed=False, applied=0, refusals=plan.refusals)
            if is_new and profile.id not in plan.scopes:
                plan = replace(plan, scopes={**plan.scopes, profile.id: ScopeMemory(scope=profile.id)})
            self._commit(plan, definitions={profile.id: profile.model_dump_json()})
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
                for fact in world.canonical_facts
            ]
            writes += [
                MemoryWrite(source=Authority.DESIGNER, op=SetWorldState(scope=WORLD_SCOPE, key=key, value=value))
                for key, value in sorted(world.initial_state.items())
                if current.state_value(key) is None
            ]
            plan = plan_batch(self._scopes, writes, self._next_seq, self.policy)
            if not plan.ok:
                self._count_refusals(plan)
                return BatchResult(committed=False, applied=0, refusals=plan.refusals)
            self._commit(plan, definitions={WORLD_SCOPE: world.model_dump_json()})
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
        """Copy all memory, profiles and counts into `slot` atomically. Returns the memory hash."""
        with self._lock:
            digest = self.memory_hash()
            image = self._image()
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO slots(name, image, memory_hash) VALUES (?, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET image=excluded.image, memory_hash=excluded.memory_hash",
                    (slot, image, digest),
                )
            return digest

    def load(self, slot: str) -> str:
        """Replace all memory with the content of `slot`, atomically. Returns the memory hash."""
        with self._lock:
            row = self.db.execute("SELECT image, memory_hash FROM slots WHERE name = ?", (slot,)).fetchone()
            if row is None:
                raise SlotNotFoundError(f"no save slot {slot!r}")
            image, expected = json.loads(row[0]), row[1]
            with self._transaction() as db:
                # Sequence numbers only ever grow, also across loads.
                loaded = _replace_contents(
                    db, image["scopes"], image["entries"], image["behaviour"], int(image["next_seq"]), grow_only=True
                )
                if loaded.memory_hash() != expected:
                    raise SlotCorruptError(f"save slot {slot!r} does not match its memory hash")
            self._install(loaded)
            return expected

    def slots(self) -> tuple[str, ...]:
        return tuple(r[0] for r in self.db.execute("SELECT name FROM slots ORDER BY name"))

    # --- internals -----------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)

    def _migrate(self) -> None:
        db = self.db
        has_version = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
        if not has_version:
            with _Transaction(db):
                for statement in _SCHEMA_V1.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO schema_version(version) VALUES (1)")
                db.execute("INSERT INTO meta(key, value) VALUES ('next_seq', 1)")
                db.execute("INSERT INTO scopes(scope, definition, interactions) VALUES (?, NULL, 0)", (WORLD_SCOPE,))
        (version,) = db.execute("SELECT version FROM schema_version").fetchone()
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(f"{self.path} has schema version {version}; this Loreguard reads up to {SCHEMA_VERSION}")
        while version < SCHEMA_VERSION:
            with _Transaction(db):
                MIGRATIONS[version](db)
                version += 1
                db.execute("UPDATE schema_version SET version = ?", (version,))

    def _install(self, loaded: _StoredState) -> None:
        """Make a freshly read database state the store's view."""
        self._scopes = loaded.scopes
        self._entry_digests = loaded.entry_digests
        self._scope_hashes: dict[str, str] = {}
        self._profiles = loaded.profiles
        self._profile_hashes: dict[str, str] = {}
        self._world = loaded.world
        self._world_hash: str | None = None
        self._interactions = loaded.interactions
        self._behaviour = loaded.behaviour
        self._next_seq = loaded.next_seq

    def _commit(
        self,
        plan: BatchPlan,
        *,
        complete_interaction: str | None = None,
        definitions: dict[str, str] | None = None,
        audit: AuditWriter | None = None,
    ) -> int | None:
        """Write a planned batch (and its audit entry) in one transaction; returns the audit
        log position, or None without `audit`."""
        digests = {name: dict(self._entry_digests.get(name, {})) for name in plan.scopes}
        for change in plan.changes:
            entry_digests = digests.setdefault(change.scope, dict(self._entry_digests.get(change.scope, {})))
            if change.action == "upsert":
                entry_digests[(change.kind.value, change.entry_id)] = sha256_hex(change.data)
            else:
                entry_digests.pop((change.kind.value, change.entry_id), None)
        scope_hashes = {
            name: _combine_entry_digests((kind, key, d) for (kind, key), d in entries.items())
            for name, entries in digests.items()
        }

        def hash_after(names: Iterable[str]) -> str:
            return combine_scope_hashes((name, scope_hashes.get(name) or self._scope_hash(name)) for name in sorted(set(names)))

        seq = None
        with self._transaction() as db:
            for scope, definition in (definitions or {}).items():
                db.execute(
                    "INSERT INTO scopes(scope, definition, interactions) VALUES (?, ?, 0) "
                    "ON CONFLICT(scope) DO UPDATE SET definition=excluded.definition",
                    (scope, definition),
                )
            for change in plan.changes:
                self._write_change(db, change)
            db.execute("UPDATE meta SET value = ? WHERE key = 'next_seq'", (plan.next_seq,))
            if complete_interaction is not None:
                db.execute("UPDATE scopes SET interactions = interactions + 1 WHERE scope = ?", (complete_interaction,))
            if audit is not None:
                seq = self._append_audit(db, audit, hash_after)
        # Only after the commit succeeded does anyone see the new state.
        self._scopes = {**self._scopes, **plan.scopes}
        self._entry_digests.update(digests)
        self._scope_hashes.update(scope_hashes)
        self._next_seq = plan.next_seq
        if complete_interaction is not None:
            self._interactions[complete_interaction] = self._interactions.get(complete_interaction, 0) + 1
        return seq

    @staticmethod
    def _append_audit(db: sqlite3.Connection, audit: AuditWriter, hash_after: Callable[[Iterable[str]], str]) -> int:
        try:
            (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM audit").fetchone()
            entry = audit(seq, hash_after)
            db.executemany("INSERT OR IGNORE INTO audit_blobs(hash, data) VALUES (?, ?)", sorted(entry.blobs.items()))
            db.execute("INSERT INTO audit(seq, npc_id, record) VALUES (?, ?, ?)", (seq, entry.npc_id, entry.record))
        except sqlite3.Error as exc:
            raise AuditWriteError(f"the audit record could not be written ({exc}); nothing was changed") from exc
        return seq

    # --- the audit log -------------------------------------------------------------------

    def audit_rows(
        self,
        *,
        npc_id: str | None = None,
        after: int = 0,
        last_seq: int | None = None,
        last: int | None = None,
    ) -> list[tuple[int, str]]:
        """(seq, record JSON) rows in log order: those after `after` up to `last_seq`, for one
        NPC or all, the newest `last` of them when given."""
        sql = "SELECT seq, record FROM audit WHERE seq > ?"
        params: list[object] = [after]
        if npc_id is not None:
            sql += " AND npc_id = ?"
            params.append(npc_id)
        if last_seq is not None:
            sql += " AND seq <= ?"
            params.append(last_seq)
        with self._lock:
            if last is None:
                return [(int(seq), record) for seq, record in self.db.execute(sql + " ORDER BY seq", params)]
            rows = self.db.execute(sql + " ORDER BY seq DESC LIMIT ?", [*params, last]).fetchall()
        return [(int(seq), record) for seq, record in reversed(rows)]

    def audit_blobs(self, hashes: Iterable[str]) -> dict[str, str]:
        """The blobs with these hashes (those that exist)."""
        wanted = json.dumps(sorted(set(hashes)))
        with self._lock:
            rows = self.db.execute("SELECT hash, data FROM audit_blobs WHERE hash IN (SELECT value FROM json_each(?))", (wanted,))
            return dict(rows.fetchall())

    def audit_blob_hashes(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self.db.execute("SELECT hash FROM audit_blobs")}

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
            (m.scope, kind.value, _entry_key(kind, entry), entry.seq, canonical_json(entry).decode("utf-8"))  # type: ignore[attr-defined]
            for m in scopes
            for kind, entry in _scope_entries(m)
        ]
        behaviour_rows = [(b.rule_id, b.positive, b.negative) for b in behaviour]
        with self._lock:
            with self._transaction() as db:
                loaded = _replace_contents(db, scope_rows, entry_rows, behaviour_rows, next_seq, grow_only=False)
            self._install(loaded)
            return self.memory_hash()

    @staticmethod
    def _write_change(db: sqlite3.Connection, change: RowChange) -> None:
        if change.action == "upsert":
            db.execute(
                "INSERT INTO entries(scope, kind, id, seq, data) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(scope, kind, id) DO UPDATE SET seq=excluded.seq, data=excluded.data",
                (change.scope, change.kind.value, change.entry_id, change.seq, change.data),
            )
        else:
            db.execute(
                "DELETE FROM entries WHERE scope = ? AND kind = ? AND id = ?",
                (change.scope, change.kind.value, change.entry_id),
            )

    def _count_refusals(self, plan: BatchPlan) -> None:
        self._counters["batches_refused"] = self._counters.get("batches_refused", 0) + 1
        for refusal in plan.refusals:
            key = f"refused.{refusal.code.value}"
            self._counters[key] = self._counters.get(key, 0) + 1

    def _image(self) -> str:
        db = self.db
        (next_seq,) = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
        image = {
            "format": 1,
            "next_seq": next_seq,
            "scopes": [list(r) for r in db.execute("SELECT scope, definition, interactions FROM scopes ORDER BY scope")],
            "entries": [list(r) for r in db.execute("SELECT scope, kind, id, seq, data FROM entries ORDER BY scope, kind, id")],
            "behaviour": [list(r) for r in db.execute("SELECT rule_id, positive, negative FROM behaviour ORDER BY rule_id")],
        }
        return canonical_json(image).decode("utf-8")


@dataclass
class _StoredState:
    """Everything the store caches, as read from the database in one pass."""

    scopes: dict[str, ScopeMemory]
    #: Per-entry digests of the stored canonical JSON, so a scope's hash after a batch costs
    #: only the entries the batch wrote.
    entry_digests: dict[str, dict[tuple[str, str], str]]
    profiles: dict[str, NpcProfile]
    world: WorldDefinition | None
    interactions: dict[str, int]
    behaviour: dict[str, BehaviourStats]
    next_seq: int

    def memory_hash(self) -> str:
        return combine_scope_hashes(
            (name, _combine_entry_digests((kind, key, d) for (kind, key), d in self.entry_digests[name].items()))
            for name in self.scopes
        )


def _read_state(db: sqlite3.Connection) -> _StoredState:
    parts: dict[str, dict[MemoryKind, list]] = {}
    profiles: dict[str, NpcProfile] = {}
    world: WorldDefinition | None = None
    interactions: dict[str, int] = {}
    for scope, definition, count in db.execute("SELECT scope, definition, interactions FROM scopes"):
        parts[scope] = {kind: [] for kind in MemoryKind}
        interactions[scope] = count
        if definition is None:
            continue
        if scope == WORLD_SCOPE:
            world = WorldDefinition.model_validate_json(definition)
        else:
            profiles[scope] = NpcProfile.model_validate_json(definition)
    digests: dict[str, dict[tuple[str, str], str]] = {scope: {} for scope in parts}
    for scope, kind, entry_id, data in db.execute("SELECT scope, kind, id, data FROM entries"):
        memory_kind = MemoryKind(kind)
        parts[scope][memory_kind].append(_ENTRY_MODELS[memory_kind].model_validate_json(data))
        digests[scope][(kind, entry_id)] = sha256_hex(data)
    scopes = {scope: _sorted_scope(scope, p) for scope, p in parts.items()}
    behaviour = {
        rule_id: BehaviourStats(rule_id=rule_id, positive=pos, negative=neg)
        for rule_id, pos, neg in db.execute("SELECT rule_id, positive, negative FROM behaviour")
    }
    (next_seq,) = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
    return _StoredState(scopes, digests, profiles, world, interactions, behaviour, next_seq)


def _replace_contents(
    db: sqlite3.Connection,
    scopes: Iterable[Sequence[object]],
    entries: Iterable[Sequence[object]],
    behaviour: Iterable[Sequence[object]],
    next_seq: int,
    *,
    grow_only: bool,
) -> _StoredState:
    """Swap every memory row for the given ones (inside the caller's transaction)."""
    db.execute("DELETE FROM scopes")
    db.execute("DELETE FROM entries")
    db.execute("DELETE FROM behaviour")
    db.executemany("INSERT INTO scopes(scope, definition, interactions) VALUES (?, ?, ?)", scopes)
    db.executemany("INSERT INTO entries(scope, kind, id, seq, data) VALUES (?, ?, ?, ?, ?)", entries)
    db.executemany("INSERT INTO behaviour(rule_id, positive, negative) VALUES (?, ?, ?)", behaviour)
    update = "MAX(value, ?)" if grow_only else "?"
    db.execute(f"UPDATE meta SET value = {update} WHERE key = 'next_seq'", (next_seq,))
    return _read_state(db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:
            # SQLite may already have rolled back by itself (SQLITE_FULL, SQLITE_IOERR, ...).
            self.db.execute("ROLLBACK")


def _result(plan: BatchPlan, *, audit_seq: int | None = None) -> BatchResult:
    seq_range = (plan.first_seq, plan.last_seq) if plan.first_seq is not None and plan.last_seq is not None else None
    return BatchResult(committed=True, applied=plan.applied, seq_range=seq_range, audit_seq=audit_seq)


__all__ = [
    "AuditEntry",
    "AuditWriter",
    "Durability",
    "MemoryStore",
    "StoreView",
    "build_scope",
    "scope_entries",
    "SCHEMA_VERSION",
    "memory_hash",
    "sha256_hex",
]
