"""Typed errors of the memory layer. Refused writes are not errors: they are `BatchResult`s."""

from __future__ import annotations

import sqlite3
from enum import Enum


class MemoryStoreError(Exception):
    """Base class of every memory-layer error."""


class UnknownScopeError(MemoryStoreError, LookupError):
    """No NPC (or world) with that id is registered."""


class SlotNotFoundError(MemoryStoreError, LookupError):
    """No save slot with that name."""


class SlotCorruptError(MemoryStoreError):
    """A save slot's content is damaged: cut short, not JSON, or not matching its memory hash."""


class SlotFormatError(MemoryStoreError):
    """The slot was written by a newer Loreguard, in a format this one does not read."""


class SlotConflictError(MemoryStoreError):
    """A save slot cannot be loaded over the current designer data: a saved belief has the id of
    a canonical fact the designer added since. Nothing was loaded."""


class MemoryFileError(MemoryStoreError):
    """The file is not a SQLite database Loreguard can read (truncated, overwritten, not one)."""


class SchemaVersionError(MemoryStoreError):
    """The database was written by a newer Loreguard than this one."""


class StoreClosedError(MemoryStoreError):
    """The store was used after `close()`."""


class StorageFault(str, Enum):
    """Why a write did not reach the disk, as a game can act on it."""

    DISK_FULL = "disk_full"
    NOT_WRITABLE = "not_writable"  # read-only file or folder, or no permission
    FOLDER_GONE = "folder_gone"  # the data folder or the memory file was removed or moved
    LOCKED = "locked"  # another process held the file past the busy timeout
    IO_ERROR = "io_error"  # the disk or file system failed the write


_IN_WORDS = {
    StorageFault.DISK_FULL: "the disk is full",
    StorageFault.NOT_WRITABLE: "the memory file cannot be written (read-only, or no permission)",
    StorageFault.FOLDER_GONE: "the data folder or the memory file is gone",
    StorageFault.LOCKED: "the memory file is locked by another process",
    StorageFault.IO_ERROR: "the disk failed the write",
}


class StorageUnavailableError(MemoryStoreError):
    """A write could not reach the disk. It was rolled back whole: memory, on disk and in RAM, is
    as it was before it, and reads go on working. The next write tries again.

    `fault` says why (`StorageFault`); `reason` says it in plain words."""

    def __init__(self, fault: StorageFault, detail: str, what: str = "the write") -> None:
        self.fault = fault
        self.reason = _IN_WORDS[fault]
        self.detail = detail
        super().__init__(f"{what} could not be saved: {self.reason} ({detail}); nothing was changed")


class AuditWriteError(StorageUnavailableError):
    """The audit record could not be written (disk full, I/O error). The batch it described was
    rolled back with it: no state changes without a record."""


class StalePlanError(MemoryStoreError):
    """A planned batch was committed after another batch changed memory: plan it again."""


def storage_fault(exc: sqlite3.Error) -> StorageFault | None:
    """The storage fault a SQLite error reports, or None when it is not one (a bug, a constraint)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return StorageFault.DISK_FULL
    if name.startswith("SQLITE_READONLY") or name.startswith("SQLITE_PERM") or "readonly" in text:
        # A read-only database whose file was deleted or moved under it says so in its extended code.
        return StorageFault.FOLDER_GONE if name == "SQLITE_READONLY_DBMOVED" else StorageFault.NOT_WRITABLE
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return StorageFault.FOLDER_GONE
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
        return StorageFault.LOCKED
    if name.startswith("SQLITE_IOERR") or "disk i/o error" in text:
        return StorageFault.IO_ERROR
    return None
