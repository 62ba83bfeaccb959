"""The memory file's one SQLite connection, the lock every part of the store takes, and its pragmas."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from loreguard.memory.errors import MemoryFileError, MemoryStoreError, StorageFault, StorageUnavailableError, StoreClosedError
from loreguard.memory.schema import Transaction, migrate

_log = logging.getLogger("loreguard.memory")


class Durability(str, Enum):
    FULL = "FULL"
    NORMAL = "NORMAL"


class MemoryFile:
    """An open memory file: the connection and the lock the store and its parts share."""

    def __init__(self, path: Path, durability: Durability, counters: dict[str, int] | None = None) -> None:
        self.path = path
        self.lock = threading.RLock()
        #: The store's counters: refused writes are counted here (`storage.write_failed`).
        self.counters = counters if counters is not None else {}
        #: The fault of the last write, while writes fail; None once one succeeds.
        self.failing: StorageFault | None = None
        self._refused_in_a_row = 0
        self._db: sqlite3.Connection | None = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        with self.opening() as db:
            # Before WAL (which writes the header): a new file can then give freed pages back
            # piecemeal (`vacuum`); on an existing file this changes nothing.
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={durability.value}")
            migrate(db, path)
        # The file as opened (and created): a write to a file since removed is refused.
        self._identity = _identity(path)

    @contextmanager
    def opening(self) -> Iterator[sqlite3.Connection]:
        """The reads that open the file: any failure closes the connection, and a file SQLite
        cannot read raises `MemoryFileError`."""
        try:
            yield self.db
        except sqlite3.DatabaseError as exc:
            self.close()
            # A truncated or overwritten file: say so, and leave it as it is for the user to look at.
            raise MemoryFileError(f"{self.path} is not a readable Loreguard memory file ({exc}); nothing was changed") from None
        except MemoryStoreError:
            self.close()
            raise

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreClosedError("the memory store is closed")
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (`schema.Transaction`). A write the disk refuses is counted,
        said in one log line when writes start failing (not per write, not as a traceback), and
        raised as `StorageUnavailableError`; the first write that succeeds after says so too."""
        try:
            self._check_still_there()
            with Transaction(self.db) as db:
                yield db
        except StorageUnavailableError as exc:
            self._refused(exc)
            raise
        if self.failing is not None:
            _log.warning("memory writes succeed again, after %d refused", self._refused_in_a_row)
            self.failing, self._refused_in_a_row = None, 0

    def _check_still_there(self) -> None:
        """SQLite goes on writing to a memory file whose folder was deleted (into a file nobody
        can open again): every write acknowledged after that would be lost with the process.
        One `stat` per write says so first."""
        if self._identity is not None and _identity(self.path) != self._identity:
            raise StorageUnavailableError(StorageFault.FOLDER_GONE, f"{self.path} was removed or replaced since it was opened")

    def _refused(self, exc: StorageUnavailableError) -> None:
        for key in ("storage.write_failed", f"storage.write_failed.{exc.fault.value}"):
            self.counters[key] = self.counters.get(key, 0) + 1
        self._refused_in_a_row += 1
        if self.failing is not exc.fault:
            _log.warning(
                "memory writes fail: %s (%s); each is refused whole and answered storage_unavailable until one succeeds",
                exc.reason, exc.detail,
            )  # fmt: skip
        self.failing = exc.fault

    def close(self) -> None:
        with self.lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def vacuum(self) -> None:
        """Give the file's free pages back to the file system, where the file allows it piecemeal
        (files created since schema version 3). A full disk stops it with nothing lost; the next
        call goes on."""
        with self.lock:
            (mode,) = self.db.execute("PRAGMA auto_vacuum").fetchone()
            if mode == 2:  # INCREMENTAL
                self.db.execute("PRAGMA incremental_vacuum").fetchall()


def _identity(path: Path) -> tuple[int, int] | None:
    """The file's (device, inode), None for an in-memory database or a file that is not there."""
    if str(path) == ":memory:":
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino
