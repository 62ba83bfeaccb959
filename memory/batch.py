"""A planned batch on its way to the file: the hashes it leads to, then its rows in one transaction."""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from loreguard.memory import audit_log
from loreguard.memory.audit_log import AuditEntry
from loreguard.memory.errors import AuditWriteError, StorageFault, storage_fault
from loreguard.memory.hashing import entry_line, sha256_hex
from loreguard.memory.recall import RecallIndex
from loreguard.memory.transitions import BatchPlan, RowChange
from loreguard.schemas.memory import BatchResult, MemoryKind, ScopeMemory


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
    #: The fallback line `complete_interaction`'s NPC spoke, which it remembers as its last
    #: (None: it keeps the one it had).
    fallback_line: str | None = None

    @property
    def ok(self) -> bool:
        return self.plan.ok


def digests_after(
    plan: BatchPlan, entry_digests: Mapping[str, dict[tuple[str, str], str]], lines_of: Callable[[str], list[str]]
) -> tuple[dict[str, dict[tuple[str, str], str]], dict[str, list[str]]]:
    """Per scope the plan changes: its entry digests and its hash text's sorted lines once the
    plan is applied, from the committed ones (`lines_of` gives a scope's, shared: copied here)."""
    digests = {name: dict(entry_digests.get(name, {})) for name in plan.scopes}
    lines = {name: list(lines_of(name)) for name in plan.scopes}
    for change in plan.changes:
        scope_digests = digests.setdefault(change.scope, dict(entry_digests.get(change.scope, {})))
        sorted_lines = lines.setdefault(change.scope, list(lines_of(change.scope)))
        kind = change.kind.value
        old = scope_digests.get((kind, change.entry_id))
        if old is not None:
            _remove_line(sorted_lines, entry_line(kind, change.entry_id, old))
        if change.action == "upsert":
            digest = scope_digests[(kind, change.entry_id)] = sha256_hex(change.data)
            bisect.insort(sorted_lines, entry_line(kind, change.entry_id, digest))
        else:
            scope_digests.pop((kind, change.entry_id), None)
    return digests, lines


def _remove_line(lines: list[str], line: str) -> None:
    """Remove `line` from the sorted `lines`, where it must stand."""
    at = bisect.bisect_left(lines, line)
    if at == len(lines) or lines[at] != line:
        raise AssertionError(f"a scope's hash lines lost {line!r}")  # digests and lines out of step: a bug
    del lines[at]


def write_batch(db: sqlite3.Connection, planned: PlannedBatch, audit: AuditEntry | None) -> None:
    """Write a planned batch's rows, and its audit record when given (inside the caller's
    transaction). A disk that cannot take the rows of a recorded batch raises `AuditWriteError`."""
    plan, complete_interaction = planned.plan, planned.complete_interaction
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
        raise AuditWriteError(storage_fault(exc) or StorageFault.IO_ERROR, str(exc), "the interaction") from exc
    db.execute("UPDATE meta SET value = ? WHERE key = 'next_seq'", (plan.next_seq,))
    if complete_interaction is not None:
        db.execute("UPDATE scopes SET interactions = interactions + 1 WHERE scope = ?", (complete_interaction,))
        if planned.fallback_line is not None:
            db.execute("UPDATE scopes SET last_fallback = ? WHERE scope = ?", (planned.fallback_line, complete_interaction))
    if audit is not None:
        audit_log.append(db, planned.audit_seq, audit)


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


def recall_after(index: RecallIndex, old: ScopeMemory | None, new: ScopeMemory, changes: Iterable[RowChange]) -> RecallIndex:
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


def batch_result(plan: BatchPlan, *, audit_seq: int | None = None) -> BatchResult:
    """What a committed plan tells its caller."""
    seq_range = (plan.first_seq, plan.last_seq) if plan.first_seq is not None and plan.last_seq is not None else None
    return BatchResult(
        committed=True, applied=plan.applied, seq_range=seq_range, audit_seq=audit_seq, contradicted=plan.contradicted
    )
