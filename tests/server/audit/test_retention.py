"""The audit log's retention: newest records kept per NPC, the rest archived, then pruned."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile
from pydantic import ValidationError

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.schemas import InteractionContext
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.package import decode_package
from loreguard.server.audit.replay import Replayer
from loreguard.server.audit.retention import AuditRetention
from loreguard.server.bench.soak import _reply
from loreguard.server.cli import main
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline

NPCS = ("guard", "merchant")


def _game(
    tmp_path: Path, retention: AuditRetention | None, policy: MemoryPolicy | None = None
) -> tuple[GovernancePipeline, AuditRecorder]:
    store = MemoryStore(tmp_path / "memory.sqlite", policy=policy)
    assert store.load_world(eldmoor_world()).committed
    for npc in NPCS:
        assert store.register_npc(guard_profile(id=npc, name=npc.title())).committed
    outputs = {npc: [_reply(turn, f"line {turn}") for turn in range(400)] for npc in NPCS}
    recorder = AuditRecorder(store, fingerprint=None, retention=retention)
    return GovernancePipeline(store, ScriptedBackend(outputs), recorder=recorder), recorder


def _play(pipeline: GovernancePipeline, turns: int, start: int = 0) -> None:
    for turn in range(start, start + turns):
        for npc in NPCS:
            ctx = InteractionContext(npc_id=npc, trigger_reason="player_utterance", player_input=f"Tell me about day {turn}.")
            result = pipeline.interact(ctx)
            assert result.audit_record_id is not None and not result.fallback_used


def _seqs(store: MemoryStore, npc: str) -> list[int]:
    return [seq for seq, _ in store.audit.rows(npc_id=npc)]


def test_each_npc_keeps_its_newest_records_and_the_rest_is_archived_replayable(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    pipeline, recorder = _game(tmp_path, AuditRetention(keep_per_npc=10, every=20, archive=archive))
    store = pipeline.store
    _play(pipeline, 30)  # 60 records: prunes after the 1st (the first record of a run), 21st and 41st
    assert len(_seqs(store, "guard")) == 10 + 9  # 10 kept at the 41st, and 9 of the guard's since
    recorder.prune()
    for npc in NPCS:
        assert len(_seqs(store, npc)) == 10
    assert _seqs(store, "guard") == list(range(41, 61, 2))  # the newest, in log order
    # Every pruned record went to the archive first, and replays exactly from there.
    archived = sorted(archive.glob("*.lgp"))
    assert archived and all(p.name.startswith(NPCS) for p in archived)
    records = [r for path in archived for r in decode_package(path.read_bytes())[0].records]
    assert sorted(r.seq for r in records) == list(range(1, 41))
    for path in archived:
        package, _ = decode_package(path.read_bytes())
        assert all(r.exact for r in Replayer(package).run().results)
    # The records left still have every blob they name, after blobs were pruned and re-stored.
    package = recorder.export(PackageSelection(), exported_by="test")
    assert [r.exact for r in Replayer(package).run().results] == [True] * 20
    assert recorder.last_prune is not None and recorder.last_prune.blobs > 0


def test_the_file_stops_growing_once_retention_takes_effect(tmp_path: Path) -> None:
    # Memory bounded too (16 entries per NPC): what is left to grow is the log.
    pipeline, _ = _game(tmp_path, AuditRetention(keep_per_npc=20, every=20), MemoryPolicy(episodic_limit=16))
    store = pipeline.store
    sizes = []
    for round_ in range(6):
        _play(pipeline, 20, start=round_ * 20)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (pages,) = store.db.execute("PRAGMA page_count").fetchone()
        sizes.append(pages)
    assert max(sizes[2:]) <= sizes[2] * 1.1, sizes


def test_a_save_keeps_the_record_that_led_to_it(tmp_path: Path) -> None:
    pipeline, recorder = _game(tmp_path, AuditRetention(keep_per_npc=3, every=1_000_000))
    store = pipeline.store
    _play(pipeline, 5)
    store.slots.save("chapter1")  # after records 1..10: guard's newest is 9, merchant's 10
    _play(pipeline, 10, start=5)
    recorder.prune()
    assert _seqs(store, "guard") == [9, 25, 27, 29]
    assert _seqs(store, "merchant") == [10, 26, 28, 30]


def test_a_prune_that_fails_does_not_fail_the_interaction_that_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline, recorder = _game(tmp_path, AuditRetention(keep_per_npc=1, every=1))

    def full_disk(seqs: object) -> tuple[int, int]:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(pipeline.store.audit, "prune", full_disk)
    with caplog.at_level(logging.ERROR, logger="loreguard.audit"):
        _play(pipeline, 2)  # each answered, recorded and applied
    assert "the prune failed" in caplog.text
    assert len(pipeline.store.audit.rows()) == 4 and pipeline.store.interactions("guard") == 2


def test_an_export_and_a_prune_never_run_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both read or delete the log only holding the recorder's log lock, so an export never
    finds blobs gone that a prune took meanwhile."""
    from loreguard.server.audit import recorder as recorder_module

    pipeline, recorder = _game(tmp_path, AuditRetention(keep_per_npc=2, every=1_000_000))
    _play(pipeline, 6)
    held: list[tuple[str, bool]] = []
    export_package, prune = recorder_module.export_package, pipeline.store.audit.prune

    def exporting(*args: object, **kwargs: object):
        held.append(("export", recorder._log_lock.locked()))
        return export_package(*args, **kwargs)

    def pruning(seqs: object) -> tuple[int, int]:
        held.append(("prune", recorder._log_lock.locked()))
        return prune(seqs)

    monkeypatch.setattr(recorder_module, "export_package", exporting)
    monkeypatch.setattr(pipeline.store.audit, "prune", pruning)
    assert len(recorder.export(PackageSelection(), exported_by="test").records) == 12
    assert recorder.prune().records == 8
    assert held == [("export", True), ("prune", True)]


def test_a_new_memory_file_gives_freed_pages_back(tmp_path: Path) -> None:
    pipeline, recorder = _game(tmp_path, AuditRetention(keep_per_npc=1, every=1_000_000))
    store = pipeline.store
    assert store.db.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
    _play(pipeline, 60)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (before,) = store.db.execute("PRAGMA page_count").fetchone()
    recorder.prune()
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (after,) = store.db.execute("PRAGMA page_count").fetchone()
    assert after < before


def test_outside_a_prune_the_log_stays_append_only(tmp_path: Path) -> None:
    pipeline, _ = _game(tmp_path, None)
    _play(pipeline, 2)
    db = sqlite3.connect(pipeline.store.path)
    for table in ("audit", "audit_blobs", "audit_refs"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(f"DELETE FROM {table}")
    db.close()


def test_an_archive_that_cannot_be_written_prunes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "archive"
    blocked.write_text("a file where the folder should be", encoding="utf-8")
    pipeline, recorder = _game(tmp_path, AuditRetention(keep_per_npc=2, every=1_000_000, archive=blocked))
    _play(pipeline, 4)
    with caplog.at_level(logging.WARNING, logger="loreguard.audit"):
        done = recorder.prune()
    assert done.records == 0 and "nothing was pruned" in caplog.text
    assert len(pipeline.store.audit.rows()) == 8


@pytest.mark.parametrize("keep", [0, -1])
def test_a_retention_of_nothing_is_refused(keep: int, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        AuditRetention(keep_per_npc=keep)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--backend", "scripted", "--audit-keep", str(keep)])
    assert exit_.value.code == 2
    assert "must keep at least 1 record per NPC" in capsys.readouterr().err


def test_an_archive_file_name_is_safe_on_every_system() -> None:
    from loreguard.server.audit.retention import _file_safe

    assert _file_safe("guard_north-2.b") == "guard_north-2.b"
    assert _file_safe("guard:north/ä") == "guard~3anorth~2f~e4"
