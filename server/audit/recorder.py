"""The black-box recorder: one audit record per interaction, written with its memory batch.

The pipeline asks for the record once its batch is planned, outside any database lock, and the
record goes into the store's append-only log in the same SQLite transaction as the interaction's
mutations (`MemoryStore.commit(planned, audit=...)`), so a record that cannot be written takes
the mutations down with it. The recorder is the pipeline's `AuditSink`. The memory image before the interaction is stored as
content-addressed blobs: a scope, profile, world or config is serialized only the first time
its hash is seen, which keeps recording cheap (`loreguard bench audit` measures it).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from loreguard.memory import AuditEntry, MemoryStore, StorageUnavailableError, StoreView, canonical_json
from loreguard.memory.entries import scope_entries
from loreguard.schemas.audit import AuditRecord, AuditTimings, DebugPackage, MemoryImage, PackageSelection
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.memory import MemoryKind, ScopeMemory
from loreguard.schemas.receipt import InteractionResult, ModelFingerprint
from loreguard.server.audit.manifests import chunk_names, chunked, entry_rows
from loreguard.server.audit.retention import AuditPrune, AuditRetention
from loreguard.server.audit.retention import prune as retention_prune

#: Records kept in RAM per NPC for `audit.tail`; the log on disk keeps more (`retention`).
DEFAULT_RING_SIZE = 50

_log = logging.getLogger("loreguard.audit")


class NoRecordsError(LookupError):
    """The selection matched no audit record."""


class AuditRecorder:
    def __init__(
        self,
        store: MemoryStore,
        *,
        fingerprint: ModelFingerprint | None,
        ring_size: int = DEFAULT_RING_SIZE,
        retention: AuditRetention | None = None,
    ) -> None:
        if isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size < 1:
            # A ring of 0 would keep nothing for `audit.tail` (and a negative one fail at the
            # first record): refused at start-up, not discovered by the first tail.
            raise ValueError(
                f"audit ring size must be a whole number of at least 1 (records kept in RAM per NPC for audit.tail); "
                f"got {ring_size!r}"
            )
        self.store = store
        self.fingerprint = fingerprint
        self.ring_size = ring_size
        #: None: the log keeps every record.
        self.retention = retention
        # A first prune comes with the first record: the log a save brought may be long already.
        self._since_prune = retention.every - 1 if retention is not None else 0
        #: Held by a prune and by an export: a package never misses what a prune took meanwhile.
        self._log_lock = threading.Lock()
        self.last_prune: AuditPrune | None = None
        self._lock = threading.Lock()
        self._rings: dict[str, deque[AuditRecord]] = {}
        self._known_blobs = store.audit.blob_hashes()
        #: Chunks made before, by their rows: most of a scope's chunks are the last record's.
        self._chunk_memo: dict[tuple[tuple[str, ...], ...], tuple[str, str]] = {}
        # Refill the rings after a restart from the newest records (enough for a few NPCs).
        for _, text in store.audit.rows(last=ring_size * 8):
            self._remember(AuditRecord.model_validate_json(text))

    # --- recording (the pipeline's worker thread) -----------------------------------------

    def entry(
        self,
        seq: int,
        *,
        context: InteractionContext,
        view: StoreView,
        config: tuple[str, str],
        result: InteractionResult,
        prompts: Iterable[str],
        timings: AuditTimings,
    ) -> tuple[AuditRecord, AuditEntry]:
        """The record of one finished interaction and the log entry that stores it. `config`
        is the (hash, canonical JSON) of the settings it ran under."""
        blobs: dict[str, str] = {}
        config_hash, config_json = config
        self._blob(blobs, config_hash, lambda: config_json)
        memories = {view.npc.scope: view.npc, view.world_memory.scope: view.world_memory}
        memories.update((other.scope, other) for other in view.others)
        for name, scope_hash in view.scope_hashes:
            if scope_hash not in self._known_blobs:
                self._scope_blobs(blobs, memories[name], scope_hash, view.entry_digests[name])
        self._blob(blobs, view.profile_hash, lambda: canonical_json(view.profile).decode("utf-8"))
        if view.world is not None and view.world_hash is not None:
            self._blob(blobs, view.world_hash, lambda: canonical_json(view.world).decode("utf-8"))
        record = AuditRecord(
            seq=seq,
            context=context,
            receipt=result.receipt,
            prompts=tuple(prompts),
            dialogue=result.dialogue,
            emotion=result.emotion,
            intents=result.intents,
            needs=result.needs,
            before=MemoryImage(
                scopes=view.scope_hashes,
                profile=view.profile_hash,
                world=view.world_hash,
                interactions=view.interactions,
                last_fallback=view.last_fallback,
                next_seq=view.next_seq,
                behaviour=tuple(view.behaviour[k] for k in sorted(view.behaviour)),
            ),
            config=config_hash,
            model=self.fingerprint,
            timings=timings,
        )
        refs = (config_hash, *record.before.blob_hashes())
        return record, AuditEntry(npc_id=record.npc_id, record=record.model_dump_json(), blobs=blobs, refs=refs)

    def committed(self, record: AuditRecord, entry: AuditEntry) -> None:
        """The record's transaction committed: its blobs are stored, and it is the newest.
        Every `retention.every` records, the log is pruned (`retention`); the pipeline calls
        this under its commit lock, so no other record is being built meanwhile."""
        with self._lock:
            self._known_blobs.update(entry.blobs)
            self._remember(record)
            self._since_prune += 1
            due = self.retention is not None and self._since_prune >= self.retention.every
        if due:
            try:
                self.prune()
            except StorageUnavailableError as exc:  # a full disk: one line, not a traceback
                _log.warning("audit retention: the prune could not be written (%s); every record is kept", exc.reason)
            except Exception:
                _log.exception("audit retention: the prune failed; every record is kept, the next prune tries again")

    def prune(self) -> AuditPrune:
        """Apply the retention policy now (see `retention.prune`). An archive that cannot be
        written leaves every record in place; the next prune tries again. Exports wait for it,
        and it for them (`_log_lock`): neither reads what the other is deleting."""
        if self.retention is None:
            return AuditPrune()
        with self._lock:
            self._since_prune = 0
        try:
            with self._log_lock:
                done = retention_prune(self.store, self.retention, self._archive_package)
        except OSError as exc:
            _log.warning("audit retention: the archive could not be written (%s); nothing was pruned", exc)
            return AuditPrune()
        with self._lock:
            if done.blobs:
                # Blobs a pruned record alone needed are gone: a later record stores them again.
                self._known_blobs = self.store.audit.blob_hashes()
            self.last_prune = done
        return done

    def _scope_blobs(self, blobs: dict[str, str], memory: ScopeMemory, scope_hash: str, digests: Mapping) -> None:
        """A scope is a manifest of chunks of its entries' digests (`manifests`; named by the
        scope hash, which the replay checks after restoring it) plus one blob per entry: an
        interaction that adds one memory stores one new entry and one new chunk, not the whole
        scope again. Only entries not stored yet are serialized (usually the newest few)."""
        rows = sorted([kind, entry_id, digest] for (kind, entry_id), digest in digests.items())
        missing = {(kind, entry_id): digest for kind, entry_id, digest in rows if digest not in self._known_blobs}
        if missing:
            for kind, entry_id, entry in _entries_named(memory, missing):
                self._blob(blobs, missing[(kind.value, entry_id)], partial(_json_text, entry))
        manifest, chunks = chunked(memory.scope, rows, self._chunk_memo)
        for name, text in chunks.items():
            self._blob(blobs, name, partial(str, text))
        blobs[scope_hash] = manifest

    def _blob(self, blobs: dict[str, str], digest: str, make: Callable[[], str]) -> None:
        """Add a blob unless it is stored already; `make` serializes only when needed."""
        if digest not in self._known_blobs and digest not in blobs:
            blobs[digest] = make()

    @property
    def last_seq(self) -> int:
        with self._lock:
            return max((ring[-1].seq for ring in self._rings.values() if ring), default=0)

    def _remember(self, record: AuditRecord) -> None:
        ring = self._rings.get(record.npc_id)
        if ring is None:
            ring = self._rings[record.npc_id] = deque(maxlen=self.ring_size)
        ring.append(record)

    # --- reading (any thread) ---------------------------------------------------------------

    def tail(self, *, npc_id: str | None = None, after: int | None = None, limit: int = 20) -> tuple[AuditRecord, ...]:
        """Recent records from the ring buffers, oldest first: the newest `limit`, or with
        `after` the first `limit` after that log position (a cursor for live tailing)."""
        with self._lock:
            rings = [self._rings.get(npc_id, ())] if npc_id is not None else list(self._rings.values())
            records = sorted((r for ring in rings for r in ring), key=lambda r: r.seq)
        if after is not None:
            return tuple(r for r in records if r.seq > after)[:limit]
        return tuple(records[-limit:])

    def records(
        self, *, npc_id: str | None = None, first_seq: int | None = None, last_seq: int | None = None, last: int | None = None
    ) -> tuple[AuditRecord, ...]:
        """Records from the log on disk, in log order."""
        return read_records(self.store, PackageSelection(npc_id=npc_id, first_seq=first_seq, last_seq=last_seq, last=last))

    def _archive_package(self, selection: PackageSelection) -> DebugPackage:
        from importlib.metadata import version

        return export_package(self.store, selection, exported_by=f"loreguard {version('loreguard')}")

    def export(self, selection: PackageSelection, *, exported_by: str) -> DebugPackage:
        """A package of the selected records; no prune removes them while it is being read."""
        with self._log_lock:
            return export_package(self.store, selection, exported_by=exported_by)


def _entries_named(memory: ScopeMemory, wanted: Mapping[tuple[str, str], str]) -> list[tuple[MemoryKind, str, Any]]:
    """The scope's entries with these (kind, id) keys. New episodic entries are the newest, so
    they are looked for from the end; the other kinds are short."""
    found: list[tuple[MemoryKind, str, Any]] = []
    left = set(wanted)
    episodic = MemoryKind.EPISODIC.value
    for entry in reversed(memory.episodic):
        if not any(kind == episodic for kind, _ in left):
            break
        if (episodic, entry.id) in left:
            left.discard((episodic, entry.id))
            found.append((MemoryKind.EPISODIC, entry.id, entry))
    if left:
        found += [(kind, entry_id, entry) for kind, entry_id, entry in scope_entries(memory) if (kind.value, entry_id) in left]
    return found


def _json_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


# Reading the log needs no recorder (and none of its start-up reads): the command line opens a
# data folder and calls these directly.


def read_records(store: MemoryStore, selection: PackageSelection) -> tuple[AuditRecord, ...]:
    """The selected records from the log on disk, in log order."""
    after = (selection.first_seq or 1) - 1
    rows = store.audit.rows(npc_id=selection.npc_id, after=after, last_seq=selection.last_seq, last=selection.last)
    return tuple(AuditRecord.model_validate_json(text) for _, text in rows)


def export_package(store: MemoryStore, selection: PackageSelection, *, exported_by: str) -> DebugPackage:
    """A debug package of the selected records and every blob they name."""
    records = read_records(store, selection)
    if not records:
        raise NoRecordsError(f"no audit records match {selection.model_dump(exclude_none=True)}")
    wanted = {digest for r in records for digest in (*r.before.blob_hashes(), r.config)}
    found = store.audit.blobs(wanted)
    manifests = [json.loads(found[digest]) for r in records for _, digest in r.before.scopes if digest in found]
    chunks = {name for m in manifests for name in chunk_names(m)}
    found.update(store.audit.blobs(chunks - set(found)))
    parsed = {name: json.loads(found[name]) for name in chunks if name in found}
    entries = {digest for m in manifests for _, _, digest in entry_rows(m, parsed)}
    found.update(store.audit.blobs(entries - set(found)))
    missing = sorted((wanted | chunks | entries) - set(found))
    if missing:
        raise LookupError(f"the audit log lacks blobs {missing[:3]}; the data folder is damaged")
    return DebugPackage(
        exported_by=exported_by,
        selection=selection,
        model=records[-1].model,
        records=records,
        blobs={digest: json.loads(found[digest]) for digest in sorted(found)},
    )


__all__ = ["AuditRecorder", "DEFAULT_RING_SIZE", "NoRecordsError", "export_package", "read_records"]
