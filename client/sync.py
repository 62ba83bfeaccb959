"""The blocking client: one DEALER socket, one request at a time (one thread per `Client`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import zmq

from loreguard.client import calls
from loreguard.client.calls import DEFAULT_ADDRESS, Call, ReplyT
from loreguard.client.errors import NoReply, error_from_envelope
from loreguard.schemas import wire
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.scene import SceneChunk, SceneNextReply, SceneState
from loreguard.schemas.wire import decode_reply, encode_request


class Client:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout_s: float | None = None,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
    ) -> None:
        """`timeout_s`: how long to wait for each reply (for each part of a streamed one) before
        `NoReply`. None (the default) follows the sidecar: an interaction's reply is waited for
        as long as its deadline allows (`hello`'s `limits.request_timeout_ms`, asked once before
        the first interaction unless `hello` was called) plus `calls.DEADLINE_MARGIN_S`; any
        other reply for `calls.DEFAULT_TIMEOUT_S` (`calls.reply_wait_s`)."""
        self.address = address
        self.timeout_s = timeout_s
        #: The sidecar's deadline of an interaction, once `hello` told it.
        self.deadline_ms: int | None = None
        self._socket = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._ids = itertools.count(1)
        #: The id of the request sent last (`cancel` it from a stream's loop).
        self.last_request_id: int | None = None

    def _wait_s(self, message_type: str, body: dict[str, Any]) -> float:
        """How long to wait for the reply to a request (`timeout_s`, or what the sidecar's deadline allows)."""
        if self.timeout_s is not None:
            return self.timeout_s
        if message_type in calls.DEADLINE_BOUND and self.deadline_ms is None:
            self.hello()
        return calls.reply_wait_s(message_type, body, self.deadline_ms)

    def request(self, message_type: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the reply body; raise the typed error on an error reply."""
        for envelope in self._exchange(message_type, body):
            reply: dict[str, Any] = envelope["body"]
            return reply
        raise AssertionError("unreachable: an exchange ends with a reply or raises")

    def _exchange(self, message_type: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send one request; yield its partial replies (`*.chunk`) and then its reply envelope.
        Each message must come within the request's wait (`_wait_s`) of the one before."""
        wait_s = self._wait_s(message_type, body)
        request_id = self.last_request_id = next(self._ids)
        self._socket.send(encode_request(request_id, message_type, body))
        deadline = time.monotonic() + wait_s
        answered = False
        try:
            while True:
                remaining_ms = int((deadline - time.monotonic()) * 1000)
                if remaining_ms <= 0 or not self._socket.poll(remaining_ms):
                    raise NoReply(f"no reply to {message_type} from {self.address} within {wait_s:g}s")
                envelope = decode_reply(self._socket.recv())
                if envelope.get("id") != request_id:
                    continue  # a late reply to a request that already timed out
                if envelope["type"] == "error":
                    answered = True
                    raise error_from_envelope(envelope)
                answered = not calls.is_chunk(envelope["type"])
                yield envelope
                if answered:
                    return
                deadline = time.monotonic() + wait_s
        finally:
            if not answered and message_type in calls.DEADLINE_BOUND:
                # No one waits for the line any more (a stream left early, a timeout): stop it,
                # so it is not remembered. Its replies are skipped as late ones.
                self._socket.send(encode_request(next(self._ids), "interact.cancel", {"request_id": request_id}))

    def send(self, call: Call[ReplyT]) -> ReplyT:
        return call.parse(self.request(call.message_type, call.body))

    # One method per message; `calls` says what each sends and what comes back.

    def hello(self, client: str = "loreguard.client") -> wire.HelloReply:
        reply = self.send(calls.hello(client))
        self.deadline_ms = reply.limits.request_timeout_ms
        return reply

    def load_world(self, world: WorldDefinition | dict[str, Any]) -> wire.WorldLoadReply:
        return self.send(calls.load_world(world))

    def register_npc(self, profile: NpcProfile | dict[str, Any]) -> wire.NpcRegisterReply:
        return self.send(calls.register_npc(profile))

    def warm(self, npc_id: str, *, wait_s: float | None = None) -> wire.NpcWarmReply:
        """Warm the NPC's prompt into the model's cache before its first line (`npc.warm`).
        With `wait_s`, return only once it is done (`wait_for_warm_ups`)."""
        reply = self.send(calls.warm(npc_id))
        if wait_s is not None:
            self.wait_for_warm_ups(wait_s)
        return reply

    def wait_for_warm_ups(self, wait_s: float) -> None:
        """Return once the sidecar has no warm-up left to do (`stats` counter `warm.pending` is
        0), what a game does when a scene loads; `NoReply` if that takes longer than `wait_s`."""
        deadline = time.monotonic() + wait_s
        while self.stats().counters.get("warm.pending", 0):
            if time.monotonic() > deadline:
                raise NoReply(f"warm-ups still pending at {self.address} after {wait_s:g}s")
            time.sleep(0.05)  # a poll of the sidecar's counter, not a wait on an outcome

    def new_game(self, seed: int | None = None) -> wire.SetStateReply:
        """A new playthrough (`calls.new_game`): a random seed unless one is given (to replay a game)."""
        return self.send(calls.new_game(seed))

    def npc_status(self, npc_id: str, *, wait: bool = False) -> wire.NpcStatusReply:
        """Whether the NPC's warm-up is done (`ready`): until then its first line waits for it.
        `wait`: the reply comes once it is done (bounded by the client's reply wait)."""
        return self.send(calls.npc_status(npc_id, wait))

    def cancel(self, request_id: int) -> wire.CancelReply:
        """Stop this client's `interact` or `scene.next` request `request_id` (`last_request_id`)
        before it commits. A stream left early (`break`) or a reply waited for in vain is
        cancelled without asking."""
        return self.send(calls.cancel(request_id))

    def set_state(self, values: dict[str, Any], *, npc_id: str | None = None, remove: tuple[str, ...] = ()) -> wire.SetStateReply:
        return self.send(calls.set_state(values, npc_id, remove))

    def interact(
        self,
        npc_id: str | InteractionContext,
        player_input: str = "",
        trigger_reason: str = "player_utterance",
        *,
        on_chunk: Callable[[wire.InteractChunk], None] | None = None,
        **fields: Any,
    ) -> InteractionResult:
        """One NPC line. With `on_chunk`, the line streams: each validated chunk is passed to it
        as it arrives, and the result (whose dialogue the chunks add up to) is returned."""
        if on_chunk is None:
            return self.send(calls.interact(npc_id, player_input, trigger_reason, fields))
        for item in self.interact_stream(npc_id, player_input, trigger_reason, **fields):
            if isinstance(item, InteractionResult):
                return item
            on_chunk(item)
        raise AssertionError("unreachable: a stream ends with its result or raises")

    def interact_stream(
        self, npc_id: str | InteractionContext, player_input: str = "", trigger_reason: str = "player_utterance", **fields: Any
    ) -> Iterator[wire.InteractChunk | InteractionResult]:
        """One NPC line, streamed: each validated chunk as it is released, then the result."""
        call = calls.interact(npc_id, player_input, trigger_reason, fields, stream=True)
        for envelope in self._exchange(call.message_type, call.body):
            if envelope["type"] == calls.CHUNK_TYPE:
                yield wire.InteractChunk.model_validate(envelope["body"])
            else:
                yield call.parse(envelope["body"])

    def memory(self, npc_id: str) -> wire.MemoryGetReply:
        return self.send(calls.memory(npc_id))

    def save(self, slot: str) -> wire.SlotReply:
        return self.send(calls.save(slot))

    def load(self, slot: str) -> wire.SlotReply:
        return self.send(calls.load(slot))

    def audit_tail(self, npc_id: str | None = None, limit: int = 20, after: int | None = None) -> wire.AuditTailReply:
        return self.send(calls.audit_tail(npc_id, limit, after))

    def audit_export(
        self,
        npc_id: str | None = None,
        last: int | None = None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        form: Literal["document", "json"] = "document",
    ) -> wire.AuditExportReply:
        return self.send(calls.audit_export(npc_id, last, first_seq, last_seq, form))

    def scene_start(self, scene_id: str, npcs: list[str] | tuple[str, ...], **fields: Any) -> SceneState:
        """Open a scene (`scene.start`): `npcs` speak in turn; `listeners`, `player_present`,
        `topic`, `max_lines`, `weights`... as `SceneStartRequest` names them."""
        return self.send(calls.scene_start(scene_id, npcs, fields))

    def scene_next(
        self, scene_id: str, *, to_end: bool = False, on_chunk: Callable[[SceneChunk], None] | None = None
    ) -> SceneNextReply:
        """The scene's next line (`to_end`: every line to its end). With `on_chunk`, the lines
        stream: each validated chunk is passed to it as it arrives."""
        call = calls.scene_next(scene_id, to_end=to_end, stream=on_chunk is not None)
        for envelope in self._exchange(call.message_type, call.body):
            if calls.is_chunk(envelope["type"]):
                assert on_chunk is not None
                on_chunk(SceneChunk.model_validate(envelope["body"]))
            else:
                return call.parse(envelope["body"])
        raise AssertionError("unreachable: an exchange ends with a reply or raises")

    def scene_say(
        self, scene_id: str, text: str, *, kind: Literal["player", "narration"] = "player", to: str | None = None
    ) -> SceneState:
        """Words said into a scene: every NPC there hears and remembers them; `to` answers next."""
        return self.send(calls.scene_say(scene_id, text, kind, to))

    def scene_end(self, scene_id: str) -> SceneState:
        return self.send(calls.scene_end(scene_id))

    def scene_get(self, scene_id: str) -> SceneState:
        return self.send(calls.scene_get(scene_id))

    def stats(self) -> wire.StatsReply:
        return self.send(calls.stats())

    def close(self) -> None:
        self._socket.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
