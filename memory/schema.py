"""The SQLite tables, their migrations, and the one way to open a write transaction."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from loreguard.memory.errors import SchemaVersionError, StorageUnavailableError, storage_fault
from loreguard.schemas.memory import WORLD_SCOPE

_log = logging.getLogger("loreguard.memory")

SCHEMA_VERSION = 4

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


# Version 3: the audit log gets a retention policy. Records and blobs stay append-only to anyone
# who opens the file, except inside a prune, which raises the `audit_pruning` flag in its own
# transaction (`audit_log.prune`). `audit_refs` lists the blobs each record names directly, so
# a prune finds the blobs still needed without reading every record; a slot remembers the log
# position it was saved at, so a prune keeps the records that led to it.
_PRUNABLE = "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only (only a retention prune removes records)'); END"
_AUDIT_V3 = (
    "CREATE TABLE audit_refs (seq INTEGER NOT NULL, hash TEXT NOT NULL, PRIMARY KEY (seq, hash))",
    "INSERT INTO meta(key, value) VALUES ('audit_pruning', 0)",
    "ALTER TABLE slots ADD COLUMN audit_seq INTEGER",
    *(f"DROP TRIGGER {table}_no_delete" for table in ("audit", "audit_blobs")),
    *(
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
        f"WHEN (SELECT value FROM meta WHERE key = 'audit_pruning') IS NOT 1 {_PRUNABLE}"
        for table in ("audit", "audit_blobs", "audit_refs")
    ),
    f"CREATE TRIGGER audit_refs_no_update BEFORE UPDATE ON audit_refs {_APPEND_ONLY}",
    # The records written before: the blobs each names directly.
    "INSERT OR IGNORE INTO audit_refs(seq, hash) "
    "SELECT seq, json_extract(record, '$.config') FROM audit WHERE json_extract(record, '$.config') IS NOT NULL",
    "INSERT OR IGNORE INTO audit_refs(seq, hash) "
    "SELECT seq, json_extract(record, '$.before.profile') FROM audit WHERE json_extract(record, '$.before.profile') IS NOT NULL",
    "INSERT OR IGNORE INTO audit_refs(seq, hash) "
    "SELECT seq, json_extract(record, '$.before.world') FROM audit WHERE json_extract(record, '$.before.world') IS NOT NULL",
    "INSERT OR IGNORE INTO audit_refs(seq, hash) "
    "SELECT a.seq, json_extract(s.value, '$[1]') FROM audit a, json_each(a.record, '$.before.scopes') s",
)


def _add_audit_retention(db: sqlite3.Connection) -> None:
    for statement in _AUDIT_V3:
        db.execute(statement)


# Version 4: each scope remembers the last fallback line its NPC spoke (NULL: none yet), so
# the next fallback passes over it. Bookkeeping like `interactions`: outside the memory hash.
def _add_last_fallback(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE scopes ADD COLUMN last_fallback TEXT")


#: Migration hook: MIGRATIONS[n] upgrades a database from version n to n + 1, inside the
#: transaction that also records the new version.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _add_audit_log,
    2: _add_audit_retention,
    3: _add_last_fallback,
}


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception. A write the disk refuses (full,
    read-only, gone, locked past the busy timeout) at BEGIN, inside or at COMMIT is rolled back
    whole and raised as `StorageUnavailableError`, so the caller never sees a half-written batch
    nor a raw `sqlite3.OperationalError`."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        try:
            if self.db.in_transaction:  # the last write's ROLLBACK failed (`_roll_back`): end it first
                self.db.execute("ROLLBACK")
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _as_storage_error(exc) from exc
        return self.db

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.OperationalError as failed:
                self._roll_back()
                raise _as_storage_error(failed) from failed
        self._roll_back()
        if isinstance(exc, sqlite3.OperationalError):
            raise _as_storage_error(exc) from exc

    def _roll_back(self) -> None:
        # SQLite may already have rolled back by itself (SQLITE_FULL, SQLITE_IOERR, ...).
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.OperationalError as exc:
                # Nothing was committed, and the write's own error is the one to raise; the next
                # write ends this transaction before it begins its own (`__enter__`).
                _log.warning("memory: a failed write could not be rolled back yet (%s); the next write does it", exc)


def _as_storage_error(exc: sqlite3.OperationalError) -> Exception:
    """The typed error of a failed write: `StorageUnavailableError` for a storage fault, else the
    SQLite error itself (a bug: a statement SQLite could not run)."""
    fault = storage_fault(exc)
    return StorageUnavailableError(fault, str(exc)) if fault is not None else exc


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Create the tables of a new file, or bring an older file up to `SCHEMA_VERSION`."""
    has_version = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if not has_version:
        with Transaction(db):
            for statement in _SCHEMA_V1.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO schema_version(version) VALUES (1)")
            db.execute("INSERT INTO meta(key, value) VALUES ('next_seq', 1)")
            db.execute("INSERT INTO scopes(scope, definition, interactions) VALUES (?, NULL, 0)", (WORLD_SCOPE,))
    (version,) = db.execute("SELECT version FROM schema_version").fetchone()
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"{path} has schema version {version}; this Loreguard reads up to {SCHEMA_VERSION}")
    while version < SCHEMA_VERSION:
        with Transaction(db):
            MIGRATIONS[version](db)
            version += 1
            db.execute("UPDATE schema_version SET version = ?", (version,))
