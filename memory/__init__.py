"""Authoritative memory: authority-checked writes, scored retrieval, SQLite persistence."""

from loreguard.memory.audit_log import AuditEntry
from loreguard.memory.authority import MINIMUM_AUTHORITY, check_write
from loreguard.memory.errors import (
    AuditWriteError,
    MemoryFileError,
    MemoryStoreError,
    SchemaVersionError,
    SlotConflictError,
    SlotCorruptError,
    SlotFormatError,
    SlotNotFoundError,
    StalePlanError,
    StorageFault,
    StorageUnavailableError,
    StoreClosedError,
    UnknownScopeError,
)
from loreguard.memory.folder_lock import DataFolderLock, FolderInUseError
from loreguard.memory.hashing import canonical_json, content_hash, memory_hash, sha256_hex
from loreguard.memory.policy import MemoryPolicy, episodic_strength
from loreguard.memory.retrieval import (
    RetrievalQuery,
    RetrievalWeights,
    keywords,
    retrieve_beliefs,
    retrieve_episodic,
)
from loreguard.memory.schema import SCHEMA_VERSION
from loreguard.memory.store import Durability, MemoryStore, PlannedBatch, StoreView
from loreguard.memory.transitions import BatchPlan, plan_batch

__all__ = [
    "AuditEntry",
    "AuditWriteError",
    "BatchPlan",
    "DataFolderLock",
    "Durability",
    "FolderInUseError",
    "MINIMUM_AUTHORITY",
    "MemoryFileError",
    "MemoryPolicy",
    "MemoryStore",
    "MemoryStoreError",
    "PlannedBatch",
    "RetrievalQuery",
    "RetrievalWeights",
    "SCHEMA_VERSION",
    "SchemaVersionError",
    "SlotConflictError",
    "SlotCorruptError",
    "SlotFormatError",
    "StoreView",
    "SlotNotFoundError",
    "StalePlanError",
    "StorageFault",
    "StorageUnavailableError",
    "StoreClosedError",
    "UnknownScopeError",
    "canonical_json",
    "check_write",
    "content_hash",
    "episodic_strength",
    "keywords",
    "memory_hash",
    "plan_batch",
    "retrieve_beliefs",
    "retrieve_episodic",
    "sha256_hex",
]
