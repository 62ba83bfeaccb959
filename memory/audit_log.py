"""The audit log's storage: append-only rows plus content-addressed blobs, in the memory file.

A record is appended inside the transaction of the batch it describes (`MemoryStore.commit`), so
there is never a state change without its record; what a record says is the audit package's
business.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loreguard.memory.errors import AuditWriteError


@dataclass(frozen=True)
class AuditEntry:
    """One audit-log row and the content-addressed blobs it names (JSON text)."""

    npc_id: str
    record: str
    blobs: Mapping[str, str]


def next_seq(db: sqlite3.Connection) -> int:
    """The log position the next record takes."""
    (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM audit").fetchone()
    return int(seq)


def append(db: sqlite3.Connection, seq: int, entry: AuditEntry) -> None:
    """Write a record at log position `seq` (inside the caller's transaction). A position already
    taken, a full disk or an I/O error raise `AuditWriteError`, and the caller rolls back."""
    try:
        db.executemany("INSERT OR IGNORE INTO audit_blobs(hash, data) VALUES (?, ?)", sorted(entry.blobs.items()))
        db.execute("INSERT INTO audit(seq, npc_id, record) VALUES (?, ?, ?)", (seq, entry.npc_id, entry.record))
    except sqlite3.Error as exc:
        raise AuditWriteError(f"the audit record could not be written ({exc}); nothing was changed") from exc


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
        return [(int(seq), record) for seq, record in db.execute(sql + " ORDER BY seq", params)]
    newest = db.execute(sql + " ORDER BY seq DESC LIMIT ?", [*params, last]).fetchall()
    return [(int(seq), record) for seq, record in reversed(newest)]


def blobs(db: sqlite3.Connection, hashes: Iterable[str]) -> dict[str, str]:
    """The blobs with these hashes (those that exist)."""
    wanted = json.dumps(sorted(set(hashes)))
    return dict(db.execute("SELECT hash, data FROM audit_blobs WHERE hash IN (SELECT value FROM json_each(?))", (wanted,)))


def blob_hashes(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT hash FROM audit_blobs")}
