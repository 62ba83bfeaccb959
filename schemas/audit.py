"""The black box: one audit record per interaction, and the debug package that carries records
to another machine for replay.

A record holds everything needed to run its interaction again: the context as the game sent
it, a reference to the memory image before it (content-addressed blobs), the pipeline config,
and the model's raw output for every attempt. Its `timings`, `seq` and `model` are metadata:
they are left out of `decision_hash`, so a replay on another machine, at another speed, can
match byte for byte.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from loreguard.schemas.base import FrozenModel, Identifier
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.output import Emotion, WorldIntent
from loreguard.schemas.receipt import ModelFingerprint, Receipt
from loreguard.schemas.rules import BehaviourStats

#: Bump when a record's meaning changes; old packages are then refused with a clear error.
PACKAGE_FORMAT_VERSION: Final = 1


class MemoryImage(FrozenModel):
    """Where an interaction started: every input the governance plane reads from the store.

    Scope memories, the profile, the world definition and the pipeline config are blobs named
    by their content hash; the same memory before two interactions is stored once. A scope's
    blob is a manifest of chunks of `[kind, entry id, entry hash]` triples, and each entry is a
    blob of its own, so a new episodic memory costs one new entry blob, one chunk and a manifest
    (`loreguard.server.audit.manifests`).
    """

    #: (scope, scope hash) for the NPC and the world, sorted by scope.
    scopes: tuple[tuple[str, str], ...]
    profile: str
    world: str | None = None
    #: The NPC's completed interactions (it picks the seed and the interaction index).
    interactions: int = Field(ge=0)
    #: The last fallback line the NPC spoke (its next fallback passes over it); None: none yet,
    #: or a record written before Loreguard remembered it.
    last_fallback: str | None = None
    #: The store's next sequence number (new episodic entries are named from it).
    next_seq: int = Field(ge=1)
    behaviour: tuple[BehaviourStats, ...] = ()

    def blob_hashes(self) -> tuple[str, ...]:
        hashes = [digest for _, digest in self.scopes] + [self.profile]
        if self.world is not None:
            hashes.append(self.world)
        return tuple(hashes)


class AuditTimings(FrozenModel):
    """Metadata: never hashed, never compared by replay."""

    ttft_ms: float = 0.0
    total_ms: float = 0.0


class AuditRecord(FrozenModel):
    #: Position in the sidecar's append-only audit log (1, 2, ...). Metadata.
    seq: int = Field(default=0, ge=0)
    context: InteractionContext
    receipt: Receipt
    #: The full prompt text of every attempt, in order (the receipt has their hashes).
    prompts: tuple[str, ...]
    dialogue: str
    emotion: Emotion = Emotion.NEUTRAL
    intents: tuple[WorldIntent, ...] = ()
    needs: tuple[str, ...] = ()
    before: MemoryImage
    #: Blob hash of the pipeline config and memory policy the interaction ran under.
    config: str
    model: ModelFingerprint | None = None
    timings: AuditTimings = AuditTimings()

    @property
    def record_id(self) -> str:
        return f"r{self.seq}"

    @property
    def npc_id(self) -> str:
        return self.receipt.npc_id

    def decision_fields(self) -> dict[str, Any]:
        """Everything the governance plane decided, as JSON values: the part a replay must
        reproduce exactly."""
        data = self.model_dump(mode="json", exclude={"seq", "model", "timings"})
        data["receipt"].pop("timings", None)
        (data["receipt"].get("cancelled") or {}).pop("after_ms", None)  # a time: metadata
        for attempt in data["receipt"]["attempts"]:
            for cost in ("tokens_evaluated", "tokens_cached"):
                attempt.pop(cost, None)  # depends on the prefix cache's state: metadata
            for cost in ("tokens_evaluated", "tokens_cached", "total_ms"):
                (attempt.get("judge") or {}).pop(cost, None)  # the judge's cost: metadata too
            for release in (attempt.get("stream") or {}).get("releases", ()):
                release.pop("released_ms", None)  # a time: metadata
        return data


class PackageSelection(FrozenModel):
    """Which records a package holds, as asked for."""

    npc_id: Identifier | None = None
    last: int | None = Field(default=None, ge=1)
    first_seq: int | None = Field(default=None, ge=1)
    last_seq: int | None = Field(default=None, ge=1)


class DebugPackage(FrozenModel):
    """Records plus everything needed to replay them, on any machine."""

    format_version: Literal[1] = PACKAGE_FORMAT_VERSION
    #: The Loreguard version that exported it (metadata).
    exported_by: str
    selection: PackageSelection
    model: ModelFingerprint | None = None
    records: tuple[AuditRecord, ...]
    #: Content hash -> JSON value: scope memories, profiles, worlds and configs the records name.
    blobs: dict[str, Any]


__all__ = ["AuditRecord", "AuditTimings", "DebugPackage", "MemoryImage", "PACKAGE_FORMAT_VERSION", "PackageSelection"]
