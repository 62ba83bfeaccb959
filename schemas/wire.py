"""Protocol v1 (see PROTOCOL.md): the envelope, the error model and every message body.

`MESSAGES` maps each request type to its request and reply body models; it is the single
source for dispatch, documentation and JSON Schema export.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, Union

import msgpack
from pydantic import BaseModel, Field, StrictBool, StringConstraints

from loreguard.schemas.audit import AuditRecord
from loreguard.schemas.base import FrozenModel, Identifier, JsonScalar, StateKey
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.memory import ScopeMemory
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.receipt import InteractionResult, ModelFingerprint
from loreguard.schemas.scene import (
    SceneChunk,
    SceneIdRequest,
    SceneNextReply,
    SceneNextRequest,
    SceneSayRequest,
    SceneStartRequest,
    SceneState,
)

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20

RequestId = Union[Annotated[int, Field(ge=-(2**63), le=2**64 - 1)], Annotated[str, StringConstraints(max_length=128)]]


class ErrorCode(str, Enum):
    BAD_REQUEST = "bad_request"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_TYPE = "unknown_type"
    INVALID = "invalid"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    OVERLOADED = "overloaded"
    TIMEOUT = "timeout"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    #: The request was cancelled (`interact.cancel`, `scene.end`) before it committed.
    CANCELLED = "cancelled"
    INTERNAL = "internal"


class Envelope(FrozenModel):
    v: int
    id: RequestId
    type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    body: dict[str, Any]


class ErrorBody(FrozenModel):
    code: ErrorCode
    message: str
    details: dict[str, Any] | None = None


class ErrorEnvelope(FrozenModel):
    v: int = PROTOCOL_VERSION
    id: RequestId | None
    type: Literal["error"] = "error"
    body: ErrorBody


# --- message bodies -------------------------------------------------------------------------


class Empty(FrozenModel):
    """A body with no fields (e.g. `stats`)."""


class HelloRequest(FrozenModel):
    client: Annotated[str, StringConstraints(max_length=128)] = ""
    versions: tuple[int, ...] = (PROTOCOL_VERSION,)


class Limits(FrozenModel):
    max_message_bytes: int
    queue_size: int
    request_timeout_ms: int


class HelloReply(FrozenModel):
    server: str
    protocol_versions: tuple[int, ...]
    capabilities: tuple[str, ...]
    model: ModelFingerprint | None
    limits: Limits
    #: The token the launcher passed to `serve --launch-token`, so a game can tell the sidecar
    #: it launched from a stale or foreign one on the same port; null when none was given.
    launch_token: str | None = None


class WorldLoadReply(FrozenModel):
    world_id: Identifier
    canonical_facts: int
    memory_hash: str


class NpcRegisterReply(FrozenModel):
    npc_id: Identifier
    canonical_facts: int
    profile_hash: str
    memory_hash: str


class NpcWarmRequest(FrozenModel):
    """Evaluate the NPC's prompt up to its new message into the model's cache in idle time, so
    its first line starts sooner. Changes no memory; never delays an interaction by more than a
    chunk of prefill; never evicts another NPC's cache (docs/streaming.md). `not_found` for an
    NPC never registered."""

    npc_id: Identifier


class NpcWarmReply(FrozenModel):
    """Sent at once; the warm-up runs in the sidecar's idle time (docs/streaming.md)."""

    npc_id: Identifier
    #: Warm-ups queued or running, this one included (`stats` counter `warm.pending`).
    pending: int


class NpcStatusReply(FrozenModel):
    """Whether the NPC's warm-up is done (`npc.status`): a game shows "getting ready" until it
    is, since a line asked for before then also waits for the prompt to be evaluated."""

    npc_id: Identifier
    #: No warm-up of this NPC is queued or running (also true when none was asked for).
    ready: bool
    #: Warm-ups queued or running, of every NPC (`stats` counter `warm.pending`).
    pending: int


class NpcStatusRequest(FrozenModel):
    npc_id: Identifier
    #: Answer once the NPC's warm-up is done (or the sidecar shuts down), not at once: a game
    #: waits on this reply rather than asking again and again.
    wait: StrictBool = False


class CancelRequest(FrozenModel):
    """Cancel this client's `interact` or `scene.next` request `request_id` (docs/cancel.md)."""

    request_id: RequestId


class CancelReply(FrozenModel):
    """`cancelled`: it was queued or running and stops before it commits; the request itself is
    answered with a `cancelled` error, and nothing of it is remembered. `finished`: it had
    already committed (or was committing): its reply stands, and so does what it remembered."""

    request_id: RequestId
    state: Literal["cancelled", "finished"]
    #: Where it stood: `queued` (dropped before it began), `running` (stopped where it was:
    #: before its next attempt, within a token of its generation, or before its commit), or
    #: `finished`.
    was: Literal["queued", "running", "finished"]


class SetStateRequest(FrozenModel):
    """Game-system writes. `npc_id` null means the world scope."""

    npc_id: Identifier | None = None
    values: dict[StateKey, JsonScalar] = Field(default_factory=dict, max_length=256)
    remove: tuple[StateKey, ...] = Field(default=(), max_length=256)


class SetStateReply(FrozenModel):
    applied: int
    memory_hash: str


class MemoryGetRequest(FrozenModel):
    npc_id: Identifier


class MemoryGetReply(FrozenModel):
    npc_id: Identifier
    memory: ScopeMemory
    world: ScopeMemory
    interactions: int
    memory_hash: str


class SlotRequest(FrozenModel):
    slot: Identifier


class SlotReply(FrozenModel):
    slot: Identifier
    memory_hash: str


class AuditTailRequest(FrozenModel):
    """Recent audit records: the newest `limit`, or with `after` (a log position) the first
    `limit` records after it, which is how a debugger follows the log live."""

    npc_id: Identifier | None = None
    limit: int = Field(default=20, ge=1, le=1000)
    after: int | None = Field(default=None, ge=0)


class AuditTailReply(FrozenModel):
    records: tuple[AuditRecord, ...]
    #: The newest log position the sidecar holds (0 before the first record).
    last_seq: int = 0


class AuditExportRequest(FrozenModel):
    """A debug package of one NPC's or every NPC's records: the newest `last`, or the log
    positions `first_seq`..`last_seq`."""

    npc_id: Identifier | None = None
    last: int | None = Field(default=None, ge=1, le=100_000)
    first_seq: int | None = Field(default=None, ge=1)
    last_seq: int | None = Field(default=None, ge=1)
    #: `document`: the package as a map; `json`: the exact text of a JSON package file (what a
    #: client that cannot reproduce canonical JSON, such as the Godot editor, saves as is).
    form: Literal["document", "json"] = "document"


class AuditExportReply(FrozenModel):
    format: Literal["json"] = "json"
    #: With form `document`: the package document as `loreguard audit export` writes it in JSON
    #: (integrity hash included).
    package: dict[str, Any] | None = None
    #: With form `json`: the file's text.
    text: str | None = None
    records: int = 0


class InteractRequest(InteractionContext):
    """The `interact` body: the InteractionContext, plus whether to stream the reply."""

    #: True: the validated dialogue comes as `interact.chunk` replies as each sentence passes the
    #: gate, then `interact.ok` as usual (docs/streaming.md). A boolean, never coerced.
    stream: StrictBool = False
    #: Set by the sidecar for a scene's lines (`scene.next`), never by a client.
    scene_turn: None = None

    def context(self) -> InteractionContext:
        """The InteractionContext the pipeline runs (and the audit record keeps)."""
        return InteractionContext.model_validate(self.model_dump(exclude={"stream"}))


class InteractChunk(FrozenModel):
    """One `interact.chunk` reply of a streamed `interact`: a piece of validated dialogue. The
    chunks of one request, in `seq` order, add up to the `dialogue` of its `interact.ok`; a
    released chunk is never withdrawn."""

    #: 0, 1, 2... in the order they were released.
    seq: int = Field(ge=0)
    text: str
    #: The model attempt that wrote it (1, 2...; a retry after a cut continues the chunks before
    #: it, so the numbers only grow); 0 for an authored fallback line.
    attempt: int = Field(ge=0)


class StatsReply(FrozenModel):
    counters: dict[str, int]
    latency_us: dict[str, int]


@dataclass(frozen=True)
class MessageSpec:
    request: type[FrozenModel]
    reply: type[FrozenModel]
    #: Who may send it: designer data, game-system writes, or anyone.
    authority: Literal["designer", "game_system", "none"]
    #: The body of the partial replies (`<type>.chunk`) a streamed request gets before its reply.
    chunk: type[FrozenModel] | None = None


MESSAGES: dict[str, MessageSpec] = {
    "hello": MessageSpec(request=HelloRequest, reply=HelloReply, authority="none"),
    "world.load": MessageSpec(request=WorldDefinition, reply=WorldLoadReply, authority="designer"),
    "npc.register": MessageSpec(request=NpcProfile, reply=NpcRegisterReply, authority="designer"),
    "npc.warm": MessageSpec(request=NpcWarmRequest, reply=NpcWarmReply, authority="none"),
    "npc.status": MessageSpec(request=NpcStatusRequest, reply=NpcStatusReply, authority="none"),
    "world.set_state": MessageSpec(request=SetStateRequest, reply=SetStateReply, authority="game_system"),
    "interact": MessageSpec(request=InteractRequest, reply=InteractionResult, authority="none", chunk=InteractChunk),
    "interact.cancel": MessageSpec(request=CancelRequest, reply=CancelReply, authority="none"),
    "memory.get": MessageSpec(request=MemoryGetRequest, reply=MemoryGetReply, authority="none"),
    "save": MessageSpec(request=SlotRequest, reply=SlotReply, authority="game_system"),
    "load": MessageSpec(request=SlotRequest, reply=SlotReply, authority="game_system"),
    "audit.tail": MessageSpec(request=AuditTailRequest, reply=AuditTailReply, authority="none"),
    "audit.export": MessageSpec(request=AuditExportRequest, reply=AuditExportReply, authority="none"),
    "stats": MessageSpec(request=Empty, reply=StatsReply, authority="none"),
    "scene.start": MessageSpec(request=SceneStartRequest, reply=SceneState, authority="game_system"),
    "scene.next": MessageSpec(request=SceneNextRequest, reply=SceneNextReply, authority="none", chunk=SceneChunk),
    "scene.say": MessageSpec(request=SceneSayRequest, reply=SceneState, authority="none"),
    "scene.end": MessageSpec(request=SceneIdRequest, reply=SceneState, authority="game_system"),
    "scene.get": MessageSpec(request=SceneIdRequest, reply=SceneState, authority="none"),
}


# --- the envelope on the wire: one MessagePack map per frame --------------------------------------


def encode_request(request_id: int | str, message_type: str, body: dict[str, Any]) -> bytes:
    return _pack({"v": PROTOCOL_VERSION, "id": request_id, "type": message_type, "body": body})


def encode_reply(request_id: int | str, message_type: str, body: BaseModel) -> bytes:
    return _pack({"v": PROTOCOL_VERSION, "id": request_id, "type": f"{message_type}.ok", "body": body.model_dump(mode="json")})


def encode_chunk(request_id: int | str, message_type: str, body: BaseModel) -> bytes:
    """A partial reply of a streamed request (`interact.chunk`)."""
    return _pack({"v": PROTOCOL_VERSION, "id": request_id, "type": f"{message_type}.chunk", "body": body.model_dump(mode="json")})


def encode_error(request_id: Any, code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> bytes:
    envelope = ErrorEnvelope(id=request_id, body=ErrorBody(code=code, message=message, details=details))
    return _pack(envelope.model_dump(mode="json"))


def decode_reply(frame: bytes) -> dict[str, Any]:
    """A reply or error envelope as a plain map (the client validates the body it expects)."""
    data = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    if not isinstance(data, dict) or "type" not in data or "body" not in data:
        raise ValueError("not a Loreguard reply envelope")
    return data


def _pack(envelope: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(envelope, use_bin_type=True)
    return packed
