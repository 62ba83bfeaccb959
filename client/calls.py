"""Every request the client can make, written once: the message type, the body, and the reply
model it comes back as. `Client` sends a `Call` and returns the model; `AsyncClient` awaits it."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.memory import GAME_SEED_KEY
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.scene import MAX_SCENE_LINES, SceneNextReply, SceneState
from loreguard.schemas.wire import (
    MESSAGES,
    AuditExportReply,
    AuditTailReply,
    CancelReply,
    HelloReply,
    MemoryGetReply,
    NpcRegisterReply,
    NpcStatusReply,
    NpcWarmReply,
    SetStateReply,
    SlotReply,
    StatsReply,
    WorldLoadReply,
)

ReplyT = TypeVar("ReplyT", bound=BaseModel)

DEFAULT_ADDRESS = "tcp://127.0.0.1:7878"

#: How long a client waits for a reply that no deadline bounds (every message but an
#: interaction's), unless it is given a `timeout_s`.
DEFAULT_TIMEOUT_S = 120.0
#: How much longer than the sidecar's deadline a client waits for an interaction's reply: the
#: sidecar answers by its deadline however slow the model (the NPC's fallback line, when the
#: model had none ready); this covers sending it on a loaded machine.
DEADLINE_MARGIN_S = 5.0


#: Messages answered by the sidecar's deadline (the model speaks), not at once; a client that
#: stops waiting for one cancels it (`interact.cancel`), so the line stops and is not remembered.
DEADLINE_BOUND = frozenset({"interact", "scene.next"})


def reply_wait_s(message_type: str, body: dict[str, Any], deadline_ms: int | None) -> float:
    """How long a request's reply may take from a sidecar whose interactions have `deadline_ms`
    (`hello`'s `limits.request_timeout_ms`): an `interact` or one `scene.next` line its deadline
    plus `DEADLINE_MARGIN_S`; every line of a scene to its end (each line has a deadline of its
    own), as many deadlines as a scene may have lines; any other message (or with no deadline
    known) `DEFAULT_TIMEOUT_S`."""
    if message_type not in DEADLINE_BOUND or deadline_ms is None:
        return DEFAULT_TIMEOUT_S
    lines = MAX_SCENE_LINES if message_type == "scene.next" and body.get("to_end") else 1
    return lines * deadline_ms / 1000 + DEADLINE_MARGIN_S


@dataclass(frozen=True)
class Call(Generic[ReplyT]):
    """One request: what to send, and the model its reply body is validated into."""

    message_type: str
    body: dict[str, Any]
    reply: type[ReplyT]

    def parse(self, body: dict[str, Any]) -> ReplyT:
        return self.reply.model_validate(body)


def _call(message_type: str, body: dict[str, Any], reply: type[ReplyT]) -> Call[ReplyT]:
    if MESSAGES[message_type].reply is not reply:  # the wire table is the one source of truth
        raise TypeError(f"{message_type} replies with {MESSAGES[message_type].reply.__name__}, not {reply.__name__}")
    return Call(message_type, body, reply)


def body_of(value: BaseModel | dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    return dict(value)


def hello(client: str) -> Call[HelloReply]:
    """Versions, capabilities, model fingerprint and limits."""
    return _call("hello", {"client": client}, HelloReply)


def load_world(world: WorldDefinition | dict[str, Any]) -> Call[WorldLoadReply]:
    return _call("world.load", body_of(world), WorldLoadReply)


def register_npc(profile: NpcProfile | dict[str, Any]) -> Call[NpcRegisterReply]:
    return _call("npc.register", body_of(profile), NpcRegisterReply)


def warm(npc_id: str) -> Call[NpcWarmReply]:
    """Evaluate the NPC's prompt into the model's cache in idle time, so its first line starts
    sooner; answered at once (`stats` counter `warm.pending` says when all are done)."""
    return _call("npc.warm", {"npc_id": npc_id}, NpcWarmReply)


def npc_status(npc_id: str, wait: bool) -> Call[NpcStatusReply]:
    """Whether the NPC's warm-up is done: a game says "getting ready" until it is. With `wait`,
    the reply comes once it is done."""
    return _call("npc.status", {"npc_id": npc_id, "wait": wait}, NpcStatusReply)


def cancel(request_id: int | str) -> Call[CancelReply]:
    """Stop an `interact` or `scene.next` request of this client before it commits: nothing of
    it is remembered, and it is answered with a `cancelled` error (`Cancelled`)."""
    return _call("interact.cancel", {"request_id": request_id}, CancelReply)


def new_game(seed: int | None) -> Call[SetStateReply]:
    """A new playthrough: lines are seeded from `seed` (a random one when None) and each NPC's
    interaction count, so the same player lines sound new; a save keeps it, and replays the same."""
    chosen = secrets.randbelow(2**32) if seed is None else seed
    return _call("world.set_state", {"npc_id": None, "values": {GAME_SEED_KEY: chosen}, "remove": []}, SetStateReply)


def set_state(values: dict[str, Any], npc_id: str | None, remove: tuple[str, ...]) -> Call[SetStateReply]:
    """Game-system world state; `npc_id=None` writes the world scope."""
    return _call("world.set_state", {"npc_id": npc_id, "values": values, "remove": list(remove)}, SetStateReply)


def interact(
    npc_id: str | InteractionContext, player_input: str, trigger_reason: str, fields: dict[str, Any], *, stream: bool = False
) -> Call[InteractionResult]:
    """One NPC line: validated dialogue, approved intents, the receipt. With `stream`, the
    dialogue also comes as `interact.chunk` replies first (`InteractChunk` bodies)."""
    if isinstance(npc_id, InteractionContext):
        body = body_of(npc_id)
    else:
        body = {"npc_id": npc_id, "trigger_reason": trigger_reason, "player_input": player_input, **fields}
    if stream:
        body["stream"] = True
    return _call("interact", body, InteractionResult)


#: The envelope type of a streamed `interact`'s partial replies.
CHUNK_TYPE = "interact.chunk"


def is_chunk(envelope_type: str) -> bool:
    """Whether an envelope is a partial reply (`interact.chunk`, `scene.next.chunk`)."""
    return envelope_type.endswith(".chunk")


def scene_start(scene_id: str, npcs: list[str] | tuple[str, ...], fields: dict[str, Any]) -> Call[SceneState]:
    """Open a scene: `npcs` speak in turn; `fields` are the rest of `SceneStartRequest`."""
    return _call("scene.start", {"scene_id": scene_id, "npcs": list(npcs), **fields}, SceneState)


def scene_next(scene_id: str, *, to_end: bool = False, stream: bool = False) -> Call[SceneNextReply]:
    """The scene's next line (or, `to_end`, every line to its end); with `stream`, the lines
    also come as `scene.next.chunk` replies first (`SceneChunk` bodies)."""
    return _call("scene.next", {"scene_id": scene_id, "to_end": to_end, "stream": stream}, SceneNextReply)


def scene_say(scene_id: str, text: str, kind: Literal["player", "narration"], to: str | None) -> Call[SceneState]:
    """Words said into a scene, heard (and remembered) by every NPC there."""
    return _call("scene.say", {"scene_id": scene_id, "text": text, "kind": kind, "to": to}, SceneState)


def scene_end(scene_id: str) -> Call[SceneState]:
    return _call("scene.end", {"scene_id": scene_id}, SceneState)


def scene_get(scene_id: str) -> Call[SceneState]:
    return _call("scene.get", {"scene_id": scene_id}, SceneState)


def memory(npc_id: str) -> Call[MemoryGetReply]:
    return _call("memory.get", {"npc_id": npc_id}, MemoryGetReply)


def save(slot: str) -> Call[SlotReply]:
    return _call("save", {"slot": slot}, SlotReply)


def load(slot: str) -> Call[SlotReply]:
    return _call("load", {"slot": slot}, SlotReply)


def audit_tail(npc_id: str | None, limit: int, after: int | None) -> Call[AuditTailReply]:
    """Recent audit records; with `after` (a log position), the ones after it."""
    return _call("audit.tail", {"npc_id": npc_id, "limit": limit, "after": after}, AuditTailReply)


def audit_export(
    npc_id: str | None, last: int | None, first_seq: int | None, last_seq: int | None, form: Literal["document", "json"]
) -> Call[AuditExportReply]:
    """A debug package: the document (`package`), or with form "json" the file's `text`."""
    body = {"npc_id": npc_id, "last": last, "first_seq": first_seq, "last_seq": last_seq, "form": form}
    return _call("audit.export", body, AuditExportReply)


def stats() -> Call[StatsReply]:
    return _call("stats", {}, StatsReply)
