"""The audit log's storage: append-only rows plus content-addressed blobs, in the memory file.

A record is appended inside the transaction of the batch it describes (`MemoryStore.commit`), so
there is never a state change without its record; what a record says is the audit package's
business. `AuditLog` is the part of the store that reads and prunes the log (`store.audit`).
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loreguard.memory.database import MemoryFile
from loreguard.memory.errors import AuditWriteError, StorageFault, storage_fault


@dataclass(frozen=True)
class AuditEntry:
    """One audit-log row and the content-addressed blobs it names (JSON text)."""

    npc_id: str
    record: str
    blobs: Mapping[str, str]
    #: The blobs the record names directly (config, profile, world, scope manifests): what a
    #: retention prune reads to find the blobs still needed.
    refs: tuple[str, ...]


def next_seq(db: sqlite3.Connection) -> int:
    """The log position the next record takes."""
    (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM audit").fetchone()
    return int(seq)


def append(db: sqlite3.Connection, seq: int, entry: AuditEntry) -> None:
    """Write a record at log position `seq` (inside the caller's transaction). A position already
    taken, a full disk or an I/O error raise `AuditWriteError`, and the caller rolls back."""
    try:
        db.executemany("INSERT OR IGNORE INTO audit_blobs(hash, data) VALUES (?, ?)", sorted(entry.blobs.items()))
        db.execute("INSERT INTO audit(seq, npc_id, record) VALUES (?, ?, ?)", (seq, entry.npc_id, _packed(entry.record)))
        db.executemany("INSERT OR IGNORE INTO audit_refs(seq, hash) VALUES (?, ?)", [(seq, h) for h in sorted(set(entry.refs))])
    except sqlite3.Error as exc:
        raise AuditWriteError(storage_fault(exc) or StorageFault.IO_ERROR, str(exc), "the audit record") from exc


def rows(
    db: sqlite3.Connection,
    *,
    npc_id: str | None = None,
    after: int = 0,
    last_seq: int | None = None,
    last: int | None = None,
) -> list[tuple[int, str]]:
    """(seq, record JSON) rows in log order: those after `after` up to `last_seq`, for one NPC or
    all, the newest `last` of them when given."""
    sql = "SELECT seq, record FROM audit WHERE seq > ?"
    params: list[object] = [after]
    if npc_id is not None:
        sql += " AND npc_id = ?"
        params.append(npc_id)
    if last_seq is not None:
        sql += " AND seq <= ?"
        params.append(last_seq)
    if last is None:
        return [(int(seq), _unpacked(record)) for seq, record in db.execute(sql + " ORDER BY seq", params)]
    newest = db.execute(sql + " ORDER BY seq DESC LIMIT ?", [*params, last]).fetchall()
    return [(int(seq), _unpacked(record)) for seq, record in reversed(newest)]


def _packed(record: str) -> bytes:
    """A record as the log stores it: its JSON, deflated. Records are mostly prompts, which
    repeat the NPC's persona and facts; deflating keeps the save file about a fifth the size."""
    return zlib.compress(record.encode("utf-8"), 1)  # level 1: most of 6's saving at a third of its time


def _unpacked(stored: str | bytes) -> str:
    """A stored record's JSON: deflated (schema 3 on) or plain text (written before)."""
    return zlib.decompress(stored).decode("utf-8") if isinstance(stored, bytes) else stored


def blobs(db: sqlite3.Connection, hashes: Iterable[str]) -> dict[str, str]:
    """The blobs with these hashes (those that exist)."""
    wanted = json.dumps(sorted(set(hashes)))
    return dict(db.execute("SELECT hash, data FROM audit_blobs WHERE hash IN (SELECT value FROM json_each(?))", (wanted,)))


def blob_hashes(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT hash FROM audit_blobs")}


def doomed(db: sqlite3.Connection, keep_per_npc: int, pinned: Iterable[int] = ()) -> dict[str, list[int]]:
    """Per NPC, the log positions a retention of `keep_per_npc` records prunes: all but its
    newest `keep_per_npc`, never a position in `pinned`, oldest first."""
    rows = db.execute(
        "SELECT npc_id, seq FROM (SELECT npc_id, seq, ROW_NUMBER() OVER (PARTITION BY npc_id ORDER BY seq DESC) AS newer "
        "FROM audit) WHERE newer > ? ORDER BY npc_id, seq",
        (keep_per_npc,),
    )
    kept = set(pinned)
    found: dict[str, list[int]] = {}
    for npc_id, seq in rows:
        if seq not in kept:
            found.setdefault(npc_id, []).append(int(seq))
    return found


def pinned_by_slots(db: sqlite3.Connection) -> set[int]:
    """Per save slot, each NPC's newest record at or before the position the slot was saved at:
    the record that led to the saved state, which a bug report from a loaded save replays."""
    return {
        int(seq)
        for (seq,) in db.execute(
            "SELECT MAX(a.seq) FROM slots s JOIN audit a ON a.seq <= s.audit_seq WHERE s.audit_seq IS NOT NULL "
            "GROUP BY s.name, a.npc_id"
        )
    }


def prune(db: sqlite3.Connection, seqs: Iterable[int]) -> tuple[int, int]:
    """Delete the records at `seqs` and every blob no remaining record needs (inside the
    caller's transaction); returns (records, blobs) deleted."""
    wanted = json.dumps(sorted(set(seqs)))
    # The flag lives in the caller's transaction: should anything below fail, the rollback lowers it.
    db.execute("UPDATE meta SET value = 1 WHERE key = 'audit_pruning'")
    records = db.execute("DELETE FROM audit WHERE seq IN (SELECT value FROM json_each(?))", (wanted,)).rowcount
    db.execute("DELETE FROM audit_refs WHERE seq IN (SELECT value FROM json_each(?))", (wanted,))
    db.execute("CREATE TEMP TABLE IF NOT EXISTS audit_live (hash TEXT PRIMARY KEY)")
    db.execute("DELETE FROM audit_live")
    db.execute("INSERT OR IGNORE INTO audit_live SELECT hash FROM audit_refs")
    # A manifest names its chunks; a chunk (or a first-format manifest) names its entries.
    db.execute(
        "INSERT OR IGNORE INTO audit_live SELECT c.value FROM audit_blobs b JOIN audit_live l ON b.hash = l.hash, "
        "json_each(b.data, '$.chunks') c"
    )
    db.execute(
        "INSERT OR IGNORE INTO audit_live SELECT json_extract(e.value, '$[2]') FROM audit_blobs b "
        "JOIN audit_live l ON b.hash = l.hash, json_each(b.data, '$.entries') e"
    )
    blobs = db.execute("DELETE FROM audit_blobs WHERE hash NOT IN (SELECT hash FROM audit_live)").rowcount
    db.execute("DELETE FROM audit_live")
    db.execute("UPDATE meta SET value = 0 WHERE key = 'audit_pruning'")
    return int(records), int(blobs)


class AuditLog:
    """The audit log of an open memory file: its records and blobs, and their retention prune."""

    def __init__(self, file: MemoryFile, counters: dict[str, int]) -> None:
        self._file = file
        #: The store's counters, where a vacuum a full disk stopped is counted.
        self._counters = counters
        #: The log position the next record takes; the store moves it past each record it commits.
        self.next_seq = next_seq(file.db)

    def rows(
        self, *, npc_id: str | None = None, after: int = 0, last_seq: int | None = None, last: int | None = None
    ) -> list[tuple[int, str]]:
        """(seq, record JSON) rows in log order; see `audit_log.rows`."""
        with self._file.lock:
            return rows(self._file.db, npc_id=npc_id, after=after, last_seq=last_seq, last=last)

    def blobs(self, hashes: Iterable[str]) -> dict[str, str]:
        """The blobs with these hashes (those that exist)."""
        with self._file.lock:
            return blobs(self._file.db, hashes)

    def blob_hashes(self) -> set[str]:
        with self._file.lock:
            return blob_hashes(self._file.db)

    def doomed(self, keep_per_npc: int) -> dict[str, list[int]]:
        """Per NPC, the records a retention of `keep_per_npc` would prune: all but its newest,
        and never the record a save slot was saved after (see `prune`)."""
        if keep_per_npc < 1:
            raise ValueError(f"audit retention must keep at least 1 record per NPC; got {keep_per_npc}")
        with self._file.lock:
            return doomed(self._file.db, keep_per_npc, pinned_by_slots(self._file.db))

    def prune(self, seqs: Iterable[int]) -> tuple[int, int]:
        """Delete these audit records and every blob no remaining record needs, in one
        transaction; returns (records, blobs) deleted. Take `seqs` from `doomed`, which keeps
        each NPC's newest records and the records save slots were saved after. Freed pages go
        back to the file system when they pass a quarter of the file."""
        with self._file.lock:
            with self._file.transaction() as db:
                deleted = prune(db, seqs)
            (pages,) = self._file.db.execute("PRAGMA page_count").fetchone()
            (free,) = self._file.db.execute("PRAGMA freelist_count").fetchone()
            if free * 4 > pages:
                try:
                    self._file.vacuum()
                except sqlite3.OperationalError:
                    # A full disk: the pruned pages stay free inside the file, reused by the next
                    # writes, and the next prune tries again. Nothing is lost.
                    self._counters["vacuum_failed"] = self._counters.get("vacuum_failed", 0) + 1
            return deleted
