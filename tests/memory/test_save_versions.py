"""Saves across versions: files earlier Loreguards wrote load today; newer or damaged ones are refused.

The fixtures in `saves/` were written by the code of earlier commits (`tools/make_save_fixtures.py`):
schema 1 with slot format 1, schema 2 with slot format 1, schema 2 and schema 3 with slot format 2.
Each holds a slot `chapter1` and memory written after it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest
from paths import TESTS

from loreguard.memory import (
    SCHEMA_VERSION,
    MemoryFileError,
    MemoryStore,
    SchemaVersionError,
    SlotCorruptError,
    SlotFormatError,
)
from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite

SAVES = TESTS / "memory" / "saves"
FIXTURES = sorted(p.stem for p in SAVES.glob("*.sqlite"))


def _copy(name: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{name}.sqlite"
    shutil.copyfile(SAVES / f"{name}.sqlite", path)
    return path


def test_every_earlier_format_has_a_fixture() -> None:
    assert FIXTURES == ["schema1-slot1", "schema2-slot1", "schema2-slot2", "schema3-slot2"]


@pytest.mark.parametrize("name", FIXTURES)
def test_a_save_an_earlier_version_wrote_loads(name: str, tmp_path: Path) -> None:
    expected = json.loads((SAVES / f"{name}.json").read_text(encoding="utf-8"))
    path = _copy(name, tmp_path)
    with MemoryStore(path) as store:
        assert "The player broke the gate." in [e.text for e in store.scope("guard").episodic]  # after the save
        digest = store.slots.load("chapter1")
        guard, world = store.scope("guard"), store.scope("@world")
        assert [e.text for e in guard.episodic] == expected["episodic"]
        assert [[b.id, b.content] for b in guard.beliefs] == expected["beliefs"]
        assert [[s.key, s.value] for s in world.world_state] == expected["world_state"]
        assert store.next_seq == expected["next_seq"]
        assert store.interactions("guard") == expected["interactions"]
        assert store.last_fallback("guard") is None  # saved before NPCs remembered their last fallback line
        if name.endswith("slot2"):  # the memory hash is defined as it was then
            assert digest == expected["memory_hash"]
        # The file is today's now: it takes writes, saves and loads them.
        op = AppendEpisodic(scope="guard", text="A new day.", significance=0.5, at_interaction=3)
        assert store.apply([MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=op)]).committed
        again = store.slots.save("chapter2")
        assert store.slots.load("chapter2") == again
    (version,) = sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()
    assert version == SCHEMA_VERSION


def test_a_schema3_file_gains_the_last_fallback_line_and_keeps_it(tmp_path: Path) -> None:
    """Schema 4 remembers each NPC's last fallback line: a file written before has none, keeps
    the next one across a reopen, and a slot saved before has none to restore."""
    path = _copy("schema3-slot2", tmp_path)
    with MemoryStore(path) as store:
        assert store.last_fallback("guard") is None
        before = store.memory_hash()
        assert store.commit(store.plan([], complete_interaction="guard", fallback_line="Move along.")).committed
        assert store.memory_hash() == before  # outside the memory hash, like the interaction count
    with MemoryStore(path) as store:
        assert store.last_fallback("guard") == "Move along."
        store.slots.load("chapter1")
        assert store.last_fallback("guard") is None


def _slot_image(store: MemoryStore, slot: str) -> dict:
    (stored,) = store.db.execute("SELECT image FROM slots WHERE name = ?", (slot,)).fetchone()
    return json.loads(zlib.decompress(stored))


def test_a_slot_of_a_newer_format_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    with MemoryStore(_copy("schema2-slot2", tmp_path)) as store:
        store.slots.save("future")
        image = _slot_image(store, "future")
        image["format"] = 99
        packed = zlib.compress(json.dumps(image).encode("utf-8"))
        store.db.execute("UPDATE slots SET image = ? WHERE name = 'future'", (packed,))
        before = store.memory_hash()
        with pytest.raises(SlotFormatError, match="newer Loreguard .*slot format 99; this one reads up to 2"):
            store.slots.load("future")
        assert store.memory_hash() == before


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: b"\x00" * len(data),  # overwritten
        lambda data: zlib.compress(b'{"format": 2, "scopes": '),  # not JSON
        lambda data: zlib.compress(b'{"format": 2}'),  # JSON, but no memory image
        lambda data: zlib.compress(b'{"format": "2", "scopes": [], "entries": []}'),  # no format number
        lambda data: zlib.compress(b'{"format": 0, "scopes": [], "entries": []}'),
    ],
)
def test_a_damaged_slot_is_refused_and_nothing_changes(tmp_path: Path, damage) -> None:
    with MemoryStore(_copy("schema2-slot2", tmp_path)) as store:
        store.slots.save("broken")
        (stored,) = store.db.execute("SELECT image FROM slots WHERE name = 'broken'").fetchone()
        store.db.execute("UPDATE slots SET image = ? WHERE name = 'broken'", (damage(stored),))
        before = store.memory_hash()
        with pytest.raises(SlotCorruptError):
            store.slots.load("broken")
        assert store.memory_hash() == before


def test_a_truncated_memory_file_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = _copy("schema2-slot2", tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:1000])
    with pytest.raises(MemoryFileError, match="not a readable Loreguard memory file"):
        MemoryStore(path)
    assert path.read_bytes() == data[:1000]


def test_a_memory_file_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = _copy("schema2-slot2", tmp_path)
    MemoryStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 1}; this Loreguard reads up to"):
        MemoryStore(path)


def test_an_audit_log_an_earlier_version_wrote_is_pruned_like_a_new_one(tmp_path: Path) -> None:
    """Schema 3 lists each record's blobs; for records written before, the migration reads
    them from the records. A prune then keeps exactly what the remaining record needs."""
    from loreguard.schemas.audit import AuditRecord, PackageSelection
    from loreguard.server.audit.recorder import export_package

    with MemoryStore(_copy("schema2-slot2", tmp_path)) as store:
        rows = store.audit.rows()
        assert [seq for seq, _ in rows] == [1, 2, 3]
        for seq, text in rows:
            record = AuditRecord.model_validate_json(text)
            refs = {h for (h,) in store.db.execute("SELECT hash FROM audit_refs WHERE seq = ?", (seq,))}
            assert refs == {record.config, *record.before.blob_hashes()}
        doomed = store.audit.doomed(1)
        assert doomed == {"guard": [1, 2]}
        records, blobs = store.audit.prune([1, 2])
        assert records == 2 and blobs > 0
        package = export_package(store, PackageSelection(), exported_by="test")  # no blob missing
        assert [r.seq for r in package.records] == [3]
