"""Save slots: a canonical JSON image of every memory row, stored with its memory hash.

A slot's image is stored deflated since schema 3; format is the image's layout, not its
storage. A slot of a format newer than this code reads is refused (`SlotFormatError`), never
guessed at. Format 2 (this one) is checked against the memory hash as it is now, which covers the next
sequence number. Format 1 slots, saved when the memory hash covered the scopes only, are
checked against that older hash and then load like any other: the image itself always held the
next sequence number.

A slot holds the game's memory; the designer's data stays as it is now. A load restores world
state, episodic memory, beliefs, interaction counts, each NPC's last fallback line (a slot saved
before schema 4 has none), behaviour stats and the next sequence number from the slot, and keeps
the current profiles, world definition and canonical facts (a scope or fact only the slot knows
comes back from it: nothing a designer wrote is dropped). A saved belief that has the id of a
fact added since refuses the load (`SlotConflictError`).

`SaveSlots` is the part of the store that saves and loads them (`store.slots`).
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable
from typing import Any

from loreguard.memory.audit_log import AuditLog
from loreguard.memory.database import MemoryFile
from loreguard.memory.errors import SlotConflictError, SlotCorruptError, SlotFormatError, SlotNotFoundError
from loreguard.memory.hashing import canonical_json, memory_hash_of, scope_hash_of, sha256_hex
from loreguard.memory.state import StoredState, replace_contents
from loreguard.memory.transitions import identity_clashes
from loreguard.schemas.memory import MemoryKind

#: The image format `image` writes.
SLOT_FORMAT = 2


def image(db: sqlite3.Connection) -> str:
    """Every memory row, profiles and counts as one canonical JSON text."""
    (next_seq,) = db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
    rows: dict[str, Any] = {
        "format": SLOT_FORMAT,
        "next_seq": next_seq,
        "scopes": [
            list(r) for r in db.execute("SELECT scope, definition, interactions, last_fallback FROM scopes ORDER BY scope")
        ],
        "entries": [list(r) for r in db.execute("SELECT scope, kind, id, seq, data FROM entries ORDER BY scope, kind, id")],
        "behaviour": [list(r) for r in db.execute("SELECT rule_id, positive, negative FROM behaviour ORDER BY rule_id")],
    }
    return canonical_json(rows).decode("utf-8")


def write(db: sqlite3.Connection, slot: str, slot_image: str, digest: str, *, audit_seq: int | None = None) -> None:
    """Store an image under `slot` (inside the caller's transaction), replacing an older one;
    `audit_seq` is the audit log's last position when it was saved."""
    db.execute(
        "INSERT INTO slots(name, image, memory_hash, audit_seq) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(name) DO UPDATE SET image=excluded.image, memory_hash=excluded.memory_hash, audit_seq=excluded.audit_seq",
        (slot, zlib.compress(slot_image.encode("utf-8"), 6), digest, audit_seq),
    )


def restore(db: sqlite3.Connection, slot: str) -> tuple[StoredState, str]:
    """Put the game's memory back as `slot` holds it, over the current designer data (inside
    the caller's transaction); returns the state read back and its memory hash. The next
    sequence number is the slot's exactly, unless a fact added since took a higher one: then the
    designer data differs anyway, and ids still never repeat. A slot whose rows do not hash to
    the hash saved with it raises `SlotCorruptError`, and the caller's transaction rolls back."""
    saved = _read(db, slot)
    canonical = MemoryKind.CANONICAL.value
    definitions = dict(db.execute("SELECT scope, definition FROM scopes"))
    rows = _scope_rows(saved)
    counts = {scope: interactions for scope, _, interactions, _ in rows}
    last_lines = {scope: line for scope, _, _, line in rows}
    saved_definitions = {scope: definition for scope, definition, _, _ in rows}
    scope_rows = [
        (name, definitions.get(name) or saved_definitions.get(name), counts.get(name, 0), last_lines.get(name))
        for name in sorted(definitions.keys() | saved_definitions.keys())
    ]
    facts = {(row[0], row[2]): tuple(row) for row in saved["entries"] if row[1] == canonical}
    facts.update(
        ((row[0], row[2]), row)
        for row in db.execute("SELECT scope, kind, id, seq, data FROM entries WHERE kind = ?", (canonical,))
    )
    entries = [tuple(row) for row in saved["entries"] if row[1] != canonical] + [facts[key] for key in sorted(facts)]
    next_seq = max([int(saved["next_seq"]), *(int(row[3]) + 1 for row in entries)])
    loaded = replace_contents(db, scope_rows, entries, saved["behaviour"], next_seq)
    clashes = identity_clashes(loaded.scopes)
    if clashes:
        raise SlotConflictError(
            f"save slot {slot!r} holds beliefs with the ids of canonical facts added since: {', '.join(clashes)}"
        )
    return loaded, loaded.memory_hash()


def _read(db: sqlite3.Connection, slot: str) -> dict[str, Any]:
    """A slot's image, checked against the memory hash saved with it."""
    row = db.execute("SELECT image, memory_hash FROM slots WHERE name = ?", (slot,)).fetchone()
    if row is None:
        raise SlotNotFoundError(f"no save slot {slot!r}")
    # Deflated since schema 3 (a slot is the whole memory: it compresses about 5x); text before.
    stored = row[0]
    try:
        saved: dict[str, Any] = json.loads(zlib.decompress(stored) if isinstance(stored, bytes) else stored)
        found = saved.get("format", 1)
    except (zlib.error, ValueError, AttributeError) as exc:
        raise SlotCorruptError(f"save slot {slot!r} is damaged or cut short ({exc}); nothing was loaded") from None
    if type(found) is not int or found < 1:
        raise SlotCorruptError(f"save slot {slot!r} names no slot format ({found!r}); nothing was loaded")
    if found > SLOT_FORMAT:
        raise SlotFormatError(
            f"save slot {slot!r} was written by a newer Loreguard (slot format {found}; this one reads up to "
            f"{SLOT_FORMAT}); nothing was loaded"
        )
    try:
        digest = _image_hash(saved)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise SlotCorruptError(
            f"save slot {slot!r} is not a memory image ({type(exc).__name__}: {exc}); nothing was loaded"
        ) from None
    if digest != row[1]:
        raise SlotCorruptError(f"save slot {slot!r} does not match its memory hash")
    return saved


def _scope_rows(saved: dict[str, Any]) -> list[tuple[Any, ...]]:
    """An image's scope rows as (scope, definition, interactions, last fallback line): a slot
    saved before schema 4 has no last line (None)."""
    return [(*row, None) if len(row) == 3 else tuple(row) for row in saved["scopes"]]


def _image_hash(saved: dict[str, Any]) -> str:
    """The memory hash of an image's rows, as its format defined it."""
    digests: dict[str, dict[tuple[str, str], str]] = {scope: {} for scope, _, _, _ in _scope_rows(saved)}
    for scope, kind, entry_id, _, data in saved["entries"]:
        digests.setdefault(scope, {})[(kind, entry_id)] = sha256_hex(data)
    if saved.get("format", 1) == 1:
        return sha256_hex("\n".join(sorted(f"{name}\t{scope_hash_of(d)}" for name, d in digests.items())))
    return memory_hash_of(digests, next_seq=int(saved["next_seq"]))


def names(db: sqlite3.Connection) -> tuple[str, ...]:
    return tuple(r[0] for r in db.execute("SELECT name FROM slots ORDER BY name"))


class SaveSlots:
    """The save slots of an open memory file. Saving reads the store's memory hash; loading puts
    the state read back into the store (`install`)."""

    def __init__(
        self, file: MemoryFile, audit: AuditLog, *, memory_hash: Callable[[], str], install: Callable[[StoredState], None]
    ) -> None:
        self._file = file
        self._audit = audit
        self._memory_hash = memory_hash
        self._install = install

    def save(self, slot: str) -> str:
        """Copy all memory, profiles and counts into `slot` atomically. Returns the memory hash.
        The slot notes the audit log's position, so a retention prune keeps the records that
        led to it (`AuditLog.doomed`); the log itself is not copied."""
        with self._file.lock:
            digest = self._memory_hash()
            slot_image = image(self._file.db)
            with self._file.transaction() as db:
                write(db, slot, slot_image, digest, audit_seq=self._audit.next_seq - 1)
            return digest

    def load(self, slot: str) -> str:
        """Put the game's memory back as `slot` holds it, atomically, the next sequence number
        included: the store is then where it was when the slot was saved, and its next writes get
        the ids they got then. The current profiles, world definition and canonical facts stay
        (designer data is not the save's). Returns the memory hash."""
        with self._file.lock:
            with self._file.transaction() as db:
                loaded, digest = restore(db, slot)
            self._install(loaded)
            return digest

    def names(self) -> tuple[str, ...]:
        with self._file.lock:
            return names(self._file.db)
