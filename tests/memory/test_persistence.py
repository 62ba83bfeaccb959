"""SQLite persistence: round trips, atomic batches, save slots, hashes across processes,
and a writer killed mid-commit."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile
from paths import TESTS
from stores import open_store

from loreguard.memory import (
    MemoryStore,
    SchemaVersionError,
    SlotConflictError,
    SlotNotFoundError,
    StalePlanError,
    StorageUnavailableError,
)
from loreguard.memory import batch as batch_module
from loreguard.schemas import (
    WORLD_SCOPE,
    AddCanonicalFact,
    AppendEpisodic,
    Authority,
    CanonicalFact,
    MemoryWrite,
    NpcProfile,
    RemoveEntry,
    SetWorldState,
    UpsertBelief,
)


def _some_writes(n: int) -> list[MemoryWrite]:
    return [
        MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope="guard", key="counter", value=n)),
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=AppendEpisodic(scope="guard", text=f"Event number {n}.", significance=0.5, at_interaction=n),
        ),
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=UpsertBelief(scope="guard", belief_id=f"b{n}", content=f"Belief {n}.", confidence=0.5, sentiment=-0.25),
        ),
    ]


def test_reopen_preserves_everything(store: MemoryStore, store_path: Path) -> None:
    for n in range(5):
        assert store.apply(_some_writes(n), complete_interaction="guard").committed
    snapshot = {scope: store.scope(scope) for scope in ("guard", WORLD_SCOPE)}
    digest, interactions = store.memory_hash(), store.interactions("guard")
    store.close()
    with MemoryStore(store_path) as reopened:
        assert reopened.memory_hash() == digest
        assert {s: reopened.scope(s) for s in snapshot} == snapshot
        assert reopened.interactions("guard") == interactions == 5
        assert reopened.profile("guard") == guard_profile()
        assert reopened.world() == eldmoor_world()


def test_save_load_round_trip(store: MemoryStore) -> None:
    for n in range(3):
        store.apply(_some_writes(n), complete_interaction="guard")
    store.behaviour.record_correction("terse", +1)
    saved_hash = store.slots.save("chapter1")
    saved_guard = store.scope("guard")

    for n in range(3, 6):
        store.apply(_some_writes(n), complete_interaction="guard")
    store.behaviour.record_correction("terse", -1)
    assert store.memory_hash() != saved_hash

    assert store.slots.load("chapter1") == saved_hash
    assert store.memory_hash() == saved_hash
    assert store.scope("guard") == saved_guard
    assert store.interactions("guard") == 3
    assert store.behaviour.stats("terse").negative == 0
    # Sequence numbers keep growing after a load.
    result = store.apply(_some_writes(9))
    assert result.seq_range[0] > max(e.seq for e in saved_guard.episodic)
    assert store.slots.names() == ("chapter1",)
    with pytest.raises(SlotNotFoundError):
        store.slots.load("nope")


def test_a_plan_is_pure_and_a_stale_one_is_refused(store: MemoryStore) -> None:
    before = store.memory_hash()
    planned = store.plan(_some_writes(1), hash_scopes=("guard", WORLD_SCOPE))
    assert store.memory_hash() == before  # planning writes nothing
    store.apply(_some_writes(2))  # another batch commits in between
    changed = store.memory_hash()
    with pytest.raises(StalePlanError):
        store.commit(planned)
    assert store.memory_hash() == changed
    fresh = store.plan(_some_writes(1), hash_scopes=("guard", WORLD_SCOPE))
    assert store.commit(fresh).committed and store.memory_hash(("guard", WORLD_SCOPE)) == fresh.memory_hash_after


def test_refused_write_mid_batch_applies_nothing(store: MemoryStore) -> None:
    before = store.memory_hash()
    batch = (
        _some_writes(1)
        + [
            MemoryWrite(
                source=Authority.DESIGNER, op=AddCanonicalFact(scope="guard", fact=CanonicalFact(id="king_name", text="x"))
            ),
        ]
        + _some_writes(2)
    )
    result = store.apply(batch)
    assert not result.committed and result.applied == 0
    assert store.memory_hash() == before


def test_io_failure_mid_batch_rolls_back(store: MemoryStore, store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = store.memory_hash()
    calls = {"n": 0}
    real = batch_module._write_changes

    def failing(db, changes):
        # Some of the batch's rows are written inside the transaction, then the disk fails.
        calls["n"] += 1
        real(db, changes[:2])
        assert db.in_transaction
        raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setattr(batch_module, "_write_changes", failing)
    with pytest.raises(StorageUnavailableError, match="the disk failed the write"):
        store.apply(_some_writes(1) + _some_writes(2))
    assert calls["n"] == 1
    assert store.memory_hash() == before
    store.close()
    with MemoryStore(store_path) as reopened:
        assert reopened.memory_hash() == before


def test_newer_schema_is_refused(store_path: Path) -> None:
    MemoryStore(store_path).close()
    db = sqlite3.connect(store_path)
    db.execute("UPDATE schema_version SET version = 99")
    db.commit()
    db.close()
    with pytest.raises(SchemaVersionError):
        MemoryStore(store_path)


_HASH_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{tests!r}, {here!r}]
    from factories import eldmoor_world, guard_profile
    from loreguard.memory import MemoryStore
    from test_persistence import _some_writes
    store = MemoryStore(sys.argv[1])
    store.load_world(eldmoor_world())
    store.register_npc(guard_profile())
    for n in range(4):
        store.apply(_some_writes(n), complete_interaction="guard")
    print(store.memory_hash())
    """
)


@pytest.mark.slow
def test_memory_hash_equal_across_processes(tmp_path: Path) -> None:
    script = _HASH_SCRIPT.format(tests=str(TESTS), here=str(Path(__file__).parent))
    hashes = []
    for i, seed in enumerate(("0", "12345")):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / f"p{i}.sqlite")],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        hashes.append(out.stdout.strip())
    with MemoryStore(tmp_path / "here.sqlite") as store:
        store.load_world(eldmoor_world())
        store.register_npc(guard_profile())
        for n in range(4):
            store.apply(_some_writes(n), complete_interaction="guard")
        hashes.append(store.memory_hash())
    assert len(hashes[0]) == 64
    assert hashes[0] == hashes[1] == hashes[2]


_WRITER_SCRIPT = textwrap.dedent(
    """
    import sys
    from loreguard.memory import MemoryPolicy, MemoryStore
    from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite, SetWorldState
    store = MemoryStore(sys.argv[1], policy=MemoryPolicy(episodic_limit=100_000))
    n = 0
    while True:
        writes = [MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope="guard", key="last", value=n))]
        writes += [
            MemoryWrite(source=Authority.VALIDATED_OUTPUT,
                        op=AppendEpisodic(scope="guard", text=f"batch {n} part {k}", significance=0.5, at_interaction=n))
            for k in range(4)
        ]
        assert store.apply(writes).committed
        sys.stdout.write(f"{n}\\n")
        sys.stdout.flush()
        n += 1
    """
)


@pytest.mark.slow
def test_killed_writer_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    with MemoryStore(path) as store:
        store.register_npc(guard_profile())
    child = subprocess.Popen([sys.executable, "-c", _WRITER_SCRIPT, str(path)], stdout=subprocess.PIPE, text=True)
    acknowledged = []
    assert child.stdout is not None
    for line in child.stdout:
        acknowledged.append(int(line))
        if len(acknowledged) >= 150:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()

    with MemoryStore(path) as reopened:
        memory = reopened.scope("guard")
        parts: dict[int, int] = {}
        for entry in memory.episodic:
            batch = int(entry.text.split()[1])
            parts[batch] = parts.get(batch, 0) + 1
        assert all(count == 4 for count in parts.values()), "a batch was half-applied"
        assert set(acknowledged) <= set(parts), "an acknowledged batch was lost"
        assert memory.state_value("last") == max(parts)
        assert sorted(parts) == list(range(len(parts)))


def test_incremental_hash_equals_hash_from_scratch(store: MemoryStore, store_path: Path) -> None:
    from loreguard.memory import memory_hash

    for n in range(6):
        store.apply(_some_writes(n))
    removed = store.apply(
        [MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=RemoveEntry(scope="guard", kind="belief", entry_id="b2"))]
    )
    assert removed.committed
    scratch = memory_hash((store.scope(name) for name in ("guard", WORLD_SCOPE)), next_seq=store.next_seq)
    assert store.memory_hash() == scratch
    store.close()
    with MemoryStore(store_path) as reopened:
        assert reopened.memory_hash() == scratch


# --- equal memory hash, equal future ------------------------------------------------------------


def _episode(n: int) -> MemoryWrite:
    return MemoryWrite(
        source=Authority.VALIDATED_OUTPUT,
        op=AppendEpisodic(scope="guard", text=f"Episode {n}.", significance=0.5, at_interaction=n),
    )


def test_a_store_loaded_from_a_slot_and_one_that_got_there_directly_hash_and_name_alike(tmp_path: Path) -> None:
    direct = open_store(tmp_path / "direct.sqlite", world=eldmoor_world(), npcs=[guard_profile()])
    loaded = open_store(tmp_path / "loaded.sqlite", world=eldmoor_world(), npcs=[guard_profile()])
    try:
        loaded.slots.save("start")
        for n in range(3):
            assert loaded.apply([_episode(n)]).committed
        assert loaded.slots.load("start") == direct.memory_hash()
        assert loaded.memory_hash() == direct.memory_hash() and loaded.next_seq == direct.next_seq
        after = [store.apply([_episode(9)]) for store in (direct, loaded)]
        assert after[0].seq_range == after[1].seq_range
        assert direct.scope("guard").episodic == loaded.scope("guard").episodic
        assert [e.id for e in loaded.scope("guard").episodic] == [f"ep{direct.next_seq - 1}"]
        assert loaded.memory_hash() == direct.memory_hash()
    finally:
        direct.close()
        loaded.close()


def test_equal_scopes_with_another_next_seq_hash_differently(store: MemoryStore) -> None:
    before, seq = store.memory_hash(), store.next_seq
    assert store.apply([_episode(1)]).committed
    removed = MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=RemoveEntry(scope="guard", kind="episodic", entry_id=f"ep{seq}"))
    assert store.apply([removed]).committed
    assert store.scope("guard").episodic == () and store.next_seq == seq + 1
    assert store.memory_hash() != before
    assert store.memory_hash(("guard",)) != before


def test_a_slot_saved_before_the_hash_covered_next_seq_still_loads(store: MemoryStore) -> None:
    import json
    import zlib

    from loreguard.memory.hashing import scope_hash_of, sha256_hex

    assert store.apply([_episode(1)]).committed
    store.slots.save("old")
    expected_scopes = {name: store.scope(name) for name in ("guard", WORLD_SCOPE)}
    stored, _ = store.db.execute("SELECT image, memory_hash FROM slots WHERE name = 'old'").fetchone()
    image = json.loads(zlib.decompress(stored))
    image["format"] = 1
    image["scopes"] = [row[:3] for row in image["scopes"]]  # scope rows had no last fallback line then
    digests: dict[str, dict[tuple[str, str], str]] = {name: {} for name, _, _ in image["scopes"]}
    for scope, kind, entry_id, _, data in image["entries"]:
        digests[scope][(kind, entry_id)] = sha256_hex(data)
    old_hash = sha256_hex("\n".join(sorted(f"{name}\t{scope_hash_of(d)}" for name, d in digests.items())))
    store.db.execute("UPDATE slots SET image = ?, memory_hash = ? WHERE name = 'old'", (json.dumps(image), old_hash))
    assert store.apply([_episode(2)]).committed
    assert store.slots.load("old") == store.memory_hash()
    assert {name: store.scope(name) for name in expected_scopes} == expected_scopes


# --- a slot holds the game's memory, not the designer's ------------------------------------------


def _with_moon(**overrides: object) -> NpcProfile:
    facts = [*(f.model_dump() for f in guard_profile().canonical_facts), {"id": "moon", "text": "Eldmoor has one moon."}]
    return guard_profile(canonical_facts=facts, **overrides)


def test_a_slot_load_keeps_a_fact_and_profile_the_designer_added_since(store: MemoryStore) -> None:
    assert store.apply(_some_writes(1)).committed
    store.slots.save("chapter1")
    saved_guard = store.scope("guard")
    assert store.apply(_some_writes(2), complete_interaction="guard").committed
    assert store.register_npc(_with_moon(persona="A wary guard.")).committed
    world = eldmoor_world(
        canonical_facts=[*(f.model_dump() for f in eldmoor_world().canonical_facts), {"id": "sun", "text": "x"}]
    )
    assert store.load_world(world).committed

    digest = store.slots.load("chapter1")
    assert digest == store.memory_hash()
    assert store.scope("guard").canonical_ids() == {"gate_hours", "king_name", "moon"}
    assert store.scope(WORLD_SCOPE).canonical_ids() == {"river", "sun"}
    assert store.profile("guard").persona == "A wary guard." and store.world() == world
    guard = store.scope("guard")
    assert (guard.episodic, guard.beliefs, guard.world_state) == (
        saved_guard.episodic,
        saved_guard.beliefs,
        saved_guard.world_state,
    )
    assert store.interactions("guard") == 0
    # The facts added since took sequence numbers past the slot's: ids still never repeat.
    assert store.next_seq > max(c.seq for c in store.scope("guard").canonical)


def test_a_slot_load_refuses_a_belief_named_like_a_fact_added_since(store: MemoryStore) -> None:
    belief = UpsertBelief(scope="guard", belief_id="moon", content="Two moons.", confidence=0.5)
    assert store.apply([MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=belief)]).committed
    store.slots.save("chapter1")
    remove = RemoveEntry(scope="guard", kind="belief", entry_id="moon")
    assert store.apply([MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=remove)]).committed
    assert store.register_npc(_with_moon()).committed
    before = store.memory_hash()
    with pytest.raises(SlotConflictError, match="guard/moon"):
        store.slots.load("chapter1")
    assert store.memory_hash() == before and "moon" in store.scope("guard").canonical_ids()


def test_a_transaction_left_open_by_a_failed_rollback_is_ended_by_the_next_write(store_path: Path) -> None:
    """A ROLLBACK that failed leaves the connection inside a transaction; the next write ends
    it first instead of failing with "cannot start a transaction within a transaction"."""
    from loreguard.memory.schema import Transaction

    db = sqlite3.connect(store_path, isolation_level=None)
    db.execute("CREATE TABLE t(x)")
    db.execute("BEGIN")
    db.execute("INSERT INTO t VALUES (1)")  # never committed
    with Transaction(db):
        db.execute("INSERT INTO t VALUES (2)")
    assert db.execute("SELECT x FROM t").fetchall() == [(2,)]
    db.close()
