"""The audit log's retention policy: keep each NPC's newest records, archive the rest, prune.

A fifty-hour game writes tens of thousands of records into the memory file the game saves.
Every `every` records the recorder prunes each NPC's log down to its newest `keep_per_npc`
records. Three kinds of record are never pruned: the records a save slot was saved after, the
records an export in progress is reading (a prune and an export never run at once), and (when
an `archive` folder is set) any record whose debug package could not be written there first. Blobs that no remaining record
needs go with the records. The prune runs on the thread that committed the record that crossed
the threshold, under the pipeline's commit lock, so no record is being built while blobs go.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from loreguard.memory import MemoryStore
from loreguard.schemas.audit import DebugPackage, PackageSelection
from loreguard.schemas.base import FrozenModel


class AuditRetention(FrozenModel):
    #: Records kept per NPC, the newest; 1 or more.
    keep_per_npc: int = Field(ge=1, le=100_000_000)
    #: Records written between two prunes.
    every: int = Field(default=500, ge=1, le=100_000_000)
    #: Write each NPC's pruned records here first, as a compressed debug package; None: prune
    #: without a copy.
    archive: Path | None = None


class AuditPrune(FrozenModel):
    """What one prune did."""

    records: int = 0
    blobs: int = 0
    archived: tuple[str, ...] = ()


def prune(
    store: MemoryStore,
    retention: AuditRetention,
    export: Callable[[PackageSelection], DebugPackage],
) -> AuditPrune:
    """Archive (when asked: each NPC's pruned records as the package `export` makes of them) and
    prune what `retention` says may go. An archive that cannot be written (a full disk) raises
    `OSError` and prunes nothing."""
    from loreguard.server.audit.package import PackageFormat, write_package

    doomed = store.audit.doomed(retention.keep_per_npc)
    if not doomed:
        return AuditPrune()
    archived = []
    if retention.archive is not None:
        retention.archive.mkdir(parents=True, exist_ok=True)
        for npc_id, seqs in sorted(doomed.items()):
            package = export(PackageSelection(npc_id=npc_id, first_seq=seqs[0], last_seq=seqs[-1]))
            path = retention.archive / f"{_file_safe(npc_id)}-{seqs[0]:09d}-{seqs[-1]:09d}.lgp"
            write_package(package, path, PackageFormat.COMPRESSED)
            archived.append(path.name)
    records, blobs = store.audit.prune(seq for seqs in doomed.values() for seq in seqs)
    return AuditPrune(records=records, blobs=blobs, archived=tuple(archived))


def _file_safe(npc_id: str) -> str:
    """The NPC id as a file name on any system ("guard:north" is not one on Windows): letters,
    digits, `_`, `-` and `.` kept, anything else as `~` and its code point."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_-.") else f"~{ord(ch):x}" for ch in npc_id)
