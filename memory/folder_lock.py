"""One owner per data folder: the sidecar serving a folder holds an exclusive lock on it while it runs.

Two sidecars on one memory file would each keep their own in-RAM memory, counters and audit
sequence, and each would write over what the other had promised. The lock is the operating
system's (`fcntl.flock` on Linux and macOS, `msvcrt.locking` on Windows), so it ends with the
process: a crash or a SIGKILL never leaves a stale lock for a person to clear. The lock file also
says who holds it, so the second sidecar's refusal can name the process.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import IO

from loreguard.memory.errors import MemoryStoreError

#: The lock file inside the data folder.
LOCK_FILE = ".loreguard.lock"
# Windows locks byte ranges, and a locked byte cannot be read by anyone else: lock one far past
# the holder's line, so a refused sidecar can still read who holds the folder.
_WINDOWS_LOCK_OFFSET = 1 << 20


class FolderInUseError(MemoryStoreError):
    """Another process (a second copy of the game, the editor's run beside an exported build)
    already serves this data folder. Nothing was opened or changed."""

    def __init__(self, folder: Path, holder: str) -> None:
        self.folder = folder
        self.holder = holder
        super().__init__(
            f"the data folder {folder} is in use by another Loreguard sidecar ({holder}); one sidecar owns a data "
            "folder at a time: stop that one, or pass another --data"
        )


class DataFolderLock:
    """An exclusive, process-lifetime lock on a data folder.

    with DataFolderLock(folder):   # FolderInUseError when another process holds it
        ...serve...
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> DataFolderLock:
        """Take the lock now or raise `FolderInUseError` naming its holder; never waits."""
        if self._file is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        # Opened without truncating: the holder's line must survive a refused open.
        handle = open(self.path, "a+", encoding="utf-8")  # held until release
        try:
            _lock(handle)
        except OSError:
            handle.seek(0)
            holder = _describe(handle.read(4096))
            handle.close()
            raise FolderInUseError(self.folder, holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(_holder_record(), sort_keys=True) + "\n")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is None:
            return
        try:
            _unlock(self._file)
        finally:
            self._file.close()
            self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def __enter__(self) -> DataFolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder_record() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime()),
        "command": " ".join(Path(arg).name if i == 0 else arg for i, arg in enumerate(sys.argv[:2])),
    }


def _describe(line: str) -> str:
    """'process 1234 on host, `loreguard serve`, since …' from the holder's line; what is known."""
    try:
        record = json.loads(line.splitlines()[0]) if line.strip() else {}
    except (ValueError, IndexError):
        record = {}
    if not isinstance(record, dict) or "pid" not in record:
        return "a process that has not said which yet"
    parts = [f"process {record['pid']}" + (f" on {record['host']}" if record.get("host") else "")]
    if record.get("command"):
        parts.append(f"`{record['command']}`")
    if record.get("since"):
        parts.append(f"since {record['since']}")
    return ", ".join(parts)


if sys.platform == "win32":
    import msvcrt

    def _lock(handle: IO[str]) -> None:
        handle.seek(_WINDOWS_LOCK_OFFSET)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock(handle: IO[str]) -> None:
        handle.seek(_WINDOWS_LOCK_OFFSET)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
