"""Save slots: a canonical JSON image of every memory row, stored with its memory hash."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from loreguard.memory.errors import SlotCorruptError, SlotNotFoundError
from loreguard.memory.hashing import canonical_json
from loreguard.memory.state import StoredState, replace_contents


def image(db: sqlite3.Connection) -> str:
    """Every memory row, profiles and counts as one canonical JSON text."""
    (next_seq,) = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
    rows: dict[str, Any] = {
        "format": 1,
        "next_seq": next_seq,
        "scopes": [list(r) for r in db.execute("SELECT scope, definition, interactions FROM scopes ORDER BY scope")],
        "entries": [list(r) for r in db.execute("SELECT scope, kind, id, seq, data FROM entries ORDER BY scope, kind, id")],
        "behaviour": [list(r) for r in db.execute("SELECT rule_id, positive, negative FROM behaviour ORDER BY rule_id")],
    }
    return canonical_json(rows).decode("utf-8")


def write(db: sqlite3.Connection, slot: str, slot_image: str, digest: str) -> None:
    """Store an image under `slot` (inside the caller's transaction), replacing an older one."""
    db.execute(
        "INSERT INTO slots(name, image, memory_hash) VALUES (?, ?, ?) "
        "ON CONFLICT(name) DO UPDATE SET image=excluded.image, memory_hash=excluded.memory_hash",
        (slot, slot_image, digest),
    )


def restore(db: sqlite3.Connection, slot: str) -> tuple[StoredState, str]:
    """Put every memory row back as `slot` holds it (inside the caller's transaction); returns
    the state read back and the slot's memory hash. A slot whose rows do not hash to the hash
    saved with it raises `SlotCorruptError`, and the caller's transaction rolls back."""
    row = db.execute("SELECT image, memory_hash FROM slots WHERE name = ?", (slot,)).fetchone()
    if row is None:
        raise SlotNotFoundError(f"no save slot {slot!r}")
    saved, expected = json.loads(row[0]), row[1]
    # Sequence numbers only ever grow, also across loads.
    loaded = replace_contents(db, saved["scopes"], saved["entries"], saved["behaviour"], int(saved["next_seq"]), grow_only=True)
    if loaded.memory_hash() != expected:
        raise SlotCorruptError(f"save slot {slot!r} does not match its memory hash")
    return loaded, expected


def names(db: sqlite3.Connection) -> tuple[str, ...]:
    return tuple(r[0] for r in db.execute("SELECT name FROM slots ORDER BY name"))
