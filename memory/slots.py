"""Save slots: a canonical JSON image of every memory row, stored with its memory hash.

Format 2 (this one) is checked against the memory hash as it is now, which covers the next
sequence number. Format 1 slots, saved when the memory hash covered the scopes only, are
checked against that older hash and then load like any other: the image itself always held the
next sequence number.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from loreguard.memory.errors import SlotCorruptError, SlotNotFoundError
from loreguard.memory.hashing import canonical_json, memory_hash_of, scope_hash_of, sha256_hex
from loreguard.memory.state import StoredState, replace_contents

#: The image format `image` writes.
SLOT_FORMAT = 2


def image(db: sqlite3.Connection) -> str:
    """Every memory row, profiles and counts as one canonical JSON text."""
    (next_seq,) = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
    rows: dict[str, Any] = {
        "format": SLOT_FORMAT,
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
    """Put every memory row back as `slot` holds it (inside the caller's transaction), the next
    sequence number included, exactly; returns the state read back and its memory hash. A slot
    whose rows do not hash to the hash saved with it raises `SlotCorruptError`, and the caller's
    transaction rolls back."""
    saved = _read(db, slot)
    loaded = replace_contents(db, saved["scopes"], saved["entries"], saved["behaviour"], int(saved["next_seq"]))
    return loaded, loaded.memory_hash()


def _read(db: sqlite3.Connection, slot: str) -> dict[str, Any]:
    """A slot's image, checked against the memory hash saved with it."""
    row = db.execute("SELECT image, memory_hash FROM slots WHERE name = ?", (slot,)).fetchone()
    if row is None:
        raise SlotNotFoundError(f"no save slot {slot!r}")
    saved, expected = json.loads(row[0]), row[1]
    if _image_hash(saved) != expected:
        raise SlotCorruptError(f"save slot {slot!r} does not match its memory hash")
    return saved


def _image_hash(saved: dict[str, Any]) -> str:
    """The memory hash of an image's rows, as its format defined it."""
    digests: dict[str, dict[tuple[str, str], str]] = {scope: {} for scope, _, _ in saved["scopes"]}
    for scope, kind, entry_id, _, data in saved["entries"]:
        digests.setdefault(scope, {})[(kind, entry_id)] = sha256_hex(data)
    if saved.get("format", 1) == 1:
        return sha256_hex("\n".join(sorted(f"{name}\t{scope_hash_of(d)}" for name, d in digests.items())))
    return memory_hash_of(digests, next_seq=int(saved["next_seq"]))


def names(db: sqlite3.Connection) -> tuple[str, ...]:
    return tuple(r[0] for r in db.execute("SELECT name FROM slots ORDER BY name"))
