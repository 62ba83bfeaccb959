"""The memory file's one SQLite connection, the lock every part of the store takes, and its pragmas."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from loreguard.memory.errors import MemoryFileError, MemoryStoreError, StoreClosedError
from loreguard.memory.schema import Transaction, migrate


class Durability(str, Enum):
    FULL = "FULL"
    NORMAL = "NORMAL"


class MemoryFile:
    """An open memory file: the connection and the lock the store and its parts share."""

    def __init__(self, path: Path, durability: Durability) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._db: sqlite3.Connection | None = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        with self.opening() as db:
            # Before WAL (which writes the header): a new file can then give freed pages back
            # piecemeal (`vacuum`); on an existing file this changes nothing.
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={durability.value}")
            migrate(db, path)

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

    def transaction(self) -> Transaction:
        return Transaction(self.db)

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
