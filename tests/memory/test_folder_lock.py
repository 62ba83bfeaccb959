"""One owner per data folder: the lock refuses a second holder, names the first, and ends with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loreguard.memory import DataFolderLock, FolderInUseError
from loreguard.memory.folder_lock import LOCK_FILE


def test_a_second_lock_on_the_folder_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with DataFolderLock(tmp_path / "save") as first:
        assert first.held
        with pytest.raises(FolderInUseError) as refused:
            DataFolderLock(tmp_path / "save").acquire()
        assert refused.value.folder == tmp_path / "save"
        assert f"process {os.getpid()}" in refused.value.holder
        assert str(tmp_path / "save") in str(refused.value) and "--data" in str(refused.value)
        # Another folder is another owner.
        with DataFolderLock(tmp_path / "other") as other:
            assert other.held
    assert not first.held
    with DataFolderLock(tmp_path / "save") as next_owner:  # released: the next owner takes it at once
        assert next_owner.held


def test_the_lock_ends_with_its_process_however_it_ends(tmp_path: Path) -> None:
    """A holder killed with SIGKILL leaves the lock file behind, but not the lock: no one has
    to clear anything by hand."""
    script = (
        "import sys; from pathlib import Path; from loreguard.memory import DataFolderLock;"
        f"lock = DataFolderLock(Path({str(tmp_path)!r})).acquire(); print('held', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUseError, match=f"process {holder.pid}"):
            DataFolderLock(tmp_path).acquire()
        holder.kill()
    assert (tmp_path / LOCK_FILE).exists()
    with DataFolderLock(tmp_path):
        assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_FILE).read_text()


def test_a_holder_line_that_is_missing_or_garbled_still_refuses(tmp_path: Path) -> None:
    with DataFolderLock(tmp_path):
        (tmp_path / LOCK_FILE).write_text("not json\n")
        with pytest.raises(FolderInUseError, match="a process that has not said which yet"):
            DataFolderLock(tmp_path).acquire()
