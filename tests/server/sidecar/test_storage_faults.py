"""Storage faults a game can understand: a write the disk refuses is rolled back whole, answered
`storage_unavailable` with the reason in words, counted, logged in one line; reads go on, and the
sidecar serves again by itself once writes succeed."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from serve_process import remembering_script, start_serve
from sidecar_helpers import free_port, running_sidecar

from loreguard.client import Client, NoReply, StorageUnavailable
from loreguard.memory import MemoryStore
from loreguard.server.demo import demo_npcs, demo_world


@contextmanager
def _disk_full(store: MemoryStore) -> Iterator[None]:
    """A real SQLITE_FULL ("database or disk is full"): the file may not grow by a single page."""
    (pages,) = store.db.execute("PRAGMA page_count").fetchone()
    store.db.execute(f"PRAGMA max_page_count = {pages}")
    try:
        yield
    finally:
        store.db.execute("PRAGMA max_page_count = 1073741823")


def test_every_write_answers_storage_unavailable_changes_nothing_and_reads_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    big = demo_npcs()[1].model_copy(update={"id": "stranger", "persona": "A stranger of many words. " * 200})
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=30) as client:
        client.interact("guard", "Hello.")
        client.save("before")
        before = sidecar.store.memory_hash()
        with caplog.at_level(logging.INFO, logger="loreguard"), _disk_full(sidecar.store):
            refused = []
            for ask in (
                lambda: client.interact("guard", "Tell me a long story. " * 80),
                lambda: client.register_npc(big),
                lambda: client.set_state({"weather": "a long storm " * 400}),
                lambda: client.interact("guard", "And another long story. " * 80),
            ):
                with pytest.raises(StorageUnavailable) as failure:
                    ask()
                refused.append(failure.value)
            # Reads keep working: memory, the audit log, stats.
            assert client.memory("guard").interactions == 1
            assert [r.record_id for r in client.audit_tail(npc_id="guard").records] == ["r1"]
            counters = client.stats().counters
        assert {(e.fault, e.reason) for e in refused} == {("disk_full", "the disk is full")}
        assert all("nothing was changed" in e.message for e in refused)
        assert sidecar.store.memory_hash() == before and "stranger" not in sidecar.store.npc_ids()
        assert counters["memory.storage.write_failed.disk_full"] == 4 and counters["interact.storage_unavailable"] == 2
        assert counters["errors.storage_unavailable"] == 2
        # One line when writes start failing, not one per write, and never a traceback.
        failing = [r for r in caplog.records if "memory writes fail" in r.getMessage()]
        assert len(failing) == 1 and "the disk is full" in failing[0].getMessage()
        assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
        # Room again: it serves by itself, says so once, and nothing acknowledged was lost.
        with caplog.at_level(logging.INFO, logger="loreguard"):
            assert client.interact("guard", "Hello again.").audit_record_id == "r2"
        assert sum("memory writes succeed again, after 4 refused" in r.getMessage() for r in caplog.records) == 1
        assert client.memory("guard").interactions == 2
        client.load("before")  # a slot saved before the fault loads


def test_a_data_folder_removed_under_the_sidecar_refuses_writes_instead_of_losing_them(tmp_path: Path) -> None:
    """SQLite would go on writing into the deleted file, acknowledging lines nobody could ever
    read back; the memory file notices the file is gone and refuses instead."""
    data = tmp_path / "data"
    data.mkdir()
    with running_sidecar(data) as sidecar, Client(sidecar.address, timeout_s=30) as client:
        client.interact("guard", "Hello.")
        shutil.rmtree(data)
        with pytest.raises(StorageUnavailable) as failure:
            client.interact("guard", "Are you still there?")
        assert failure.value.fault == "folder_gone"
        assert str(data / "memory.sqlite") in failure.value.message
        assert client.memory("guard").interactions == 1


@contextmanager
def _tiny_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A real filesystem of `size` at `where` (tmpfs; needs the right to mount, which CI's root
    has). Skips where the platform does not allow it."""
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_through_a_real_sidecar(tmp_path: Path) -> None:
    """The issue's run: `loreguard serve` on a 2 MiB filesystem. Every interaction is answered
    (its line, or `storage_unavailable`), the log holds no traceback, the sidecar serves again
    once there is room, and every interaction acknowledged before the fault is in memory and in
    the audit log afterwards (counted in a fresh store on the same file)."""
    port, script = free_port(), remembering_script(tmp_path)
    with _tiny_filesystem(tmp_path / "disk", "2m") as disk:
        data = disk / "save"
        process = start_serve(data, port, script)
        acknowledged, refused, other = 0, 0, []
        try:
            with Client(f"tcp://127.0.0.1:{port}", timeout_s=30) as client:
                client.load_world(demo_world())
                client.register_npc(demo_npcs()[0])
                # What is left, but for 256 KiB, goes to a file the "player" can delete later.
                free = shutil.disk_usage(disk).free
                (disk / "filler").write_bytes(b"\0" * max(0, free - 256 * 1024))
                while refused < 5 and acknowledged < 2000:
                    try:
                        client.interact("guard", f"Tell me about the road, part {acknowledged}. " * 8)
                        acknowledged += 1
                    except StorageUnavailable as exc:
                        assert exc.fault == "disk_full", exc
                        refused += 1
                    except NoReply as exc:  # the one thing that must never happen
                        other.append(exc)
                        break
                assert not other and refused == 5 and acknowledged > 0, (acknowledged, refused, other)
                assert client.memory("guard").interactions == acknowledged
                (disk / "filler").unlink()  # room again
                client.interact("guard", "The road again, now that there is room.")
                acknowledged += 1
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=60)
        assert process.returncode == 0, output
        assert "Traceback" not in output, output
        assert output.count("memory writes fail: the disk is full") == 1, output
        assert "memory writes succeed again, after 5 refused" in output, output
        with MemoryStore(data / "memory.sqlite") as store:
            assert store.interactions("guard") == acknowledged
            assert len(store.audit.rows(npc_id="guard")) == acknowledged
