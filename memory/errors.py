"""Typed errors of the memory layer. Refused writes are not errors: they are `BatchResult`s."""

from __future__ import annotations


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


class AuditWriteError(MemoryStoreError):
    """The audit record could not be written (disk full, I/O error). The batch it described was
    rolled back with it: no state changes without a record."""


class StalePlanError(MemoryStoreError):
    """A planned batch was committed after another batch changed memory: plan it again."""
