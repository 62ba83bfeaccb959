"""The asyncio client: many requests in flight on one socket, replies matched by id."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import zmq
import zmq.asyncio

from loreguard.client import calls
from loreguard.client.calls import DEFAULT_ADDRESS, Call, ReplyT
from loreguard.client.errors import NoReply, error_from_envelope
from loreguard.schemas import wire
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.receipt import InteractionResult
from loreguard.schemas.scene import SceneChunk, SceneNextReply, SceneState
from loreguard.schemas.wire import decode_reply, encode_request


class AsyncClient:
    def __init__(
        self, address: str = DEFAULT_ADDRESS, *, timeout_s: float | None = None, context: zmq.asyncio.Context | None = None
    ) -> None:
        """`timeout_s`: how long to wait for each reply (for each part of a streamed one) before
        `NoReply`. None (the default) follows the sidecar, as `Client` does: an interaction's
        reply is waited for as long as its deadline allows plus `calls.DEADLINE_MARGIN_S`."""
        self.address = address
        self.timeout_s = timeout_s
        #: The sidecar's deadline of an interaction, once `hello` told it.
        self.deadline_ms: int | None = None
        self._socket = (context or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        #: Streamed requests: every envelope with their id, chunks and the end, in order.
        self._streams: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        while True:
            envelope = decode_reply(await self._socket.recv())
            stream = self._streams.get(envelope.get("id"))  # type: ignore[arg-type]
            if stream is not None:
                stream.put_nowait(envelope)
                continue
            future = self._pending.pop(envelope.get("id"), None)  # type: ignore[arg-type]
            if future is None or future.done():
                continue
            if envelope["type"] == "error":
                future.set_exception(error_from_envelope(envelope))
            else:
                future.set_result(envelope["body"])

    async def _wait_s(self, message_type: str, body: dict[str, Any]) -> float:
        """How long to wait for the reply to a request (`timeout_s`, or what the sidecar's deadline allows)."""
        if self.timeout_s is not None:
            return self.timeout_s
        if message_type in calls.DEADLINE_BOUND and self.deadline_ms is None:
            await self.hello()
        return calls.reply_wait_s(message_type, body, self.deadline_ms)

    async def request(self, message_type: str, body: dict[str, Any]) -> dict[str, Any]:
        wait_s = await self._wait_s(message_type, body)
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self._socket.send(encode_request(request_id, message_type, body))
        try:
            return await asyncio.wait_for(future, wait_s)
        except TimeoutError:
            raise NoReply(f"no reply to {message_type} from {self.address} within {wait_s:g}s") from None
        finally:
            self._pending.pop(request_id, None)
            if not future.done() or future.cancelled():  # wait_for cancels it when it is cancelled
                await self._abandon(message_type, request_id)

    async def _exchange(self, message_type: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Send one request; yield its partial replies and then its reply envelope. Each must
        come within the request's wait (`_wait_s`) of the one before."""
        wait_s = await self._wait_s(message_type, body)
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        request_id = next(self._ids)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._streams[request_id] = queue
        answered = False
        try:
            await self._socket.send(encode_request(request_id, message_type, body))
            while True:
                try:
                    envelope = await asyncio.wait_for(queue.get(), wait_s)
                except TimeoutError:
                    raise NoReply(f"no reply to {message_type} from {self.address} within {wait_s:g}s") from None
                answered = envelope["type"] == "error" or not calls.is_chunk(envelope["type"])
                if envelope["type"] == "error":
                    raise error_from_envelope(envelope)
                yield envelope
                if answered:
                    return
        finally:
            self._streams.pop(request_id, None)
            if not answered:
                await self._abandon(message_type, request_id)

    async def _abandon(self, message_type: str, request_id: int) -> None:
        """No one waits for the line any more (the task was cancelled, the stream closed early,
        a timeout): stop it on the sidecar, so it is not remembered. The reply is not waited for."""
        if message_type in calls.DEADLINE_BOUND:
            await self._socket.send(encode_request(next(self._ids), "interact.cancel", {"request_id": request_id}))

    async def send(self, call: Call[ReplyT]) -> ReplyT:
        return call.parse(await self.request(call.message_type, call.body))

    # The same methods as `Client`, awaitable; `calls` says what each sends and what comes back.

    async def hello(self, client: str = "loreguard.client") -> wire.HelloReply:
        reply = await self.send(calls.hello(client))
        self.deadline_ms = reply.limits.request_timeout_ms
        return reply

    async def load_world(self, world: WorldDefinition | dict[str, Any]) -> wire.WorldLoadReply:
        return await self.send(calls.load_world(world))

    async def register_npc(self, profile: NpcProfile | dict[str, Any]) -> wire.NpcRegisterReply:
        return await self.send(calls.register_npc(profile))

    async def warm(self, npc_id: str, *, wait_s: float | None = None) -> wire.NpcWarmReply:
        """Warm the NPC's prompt into the model's cache before its first line (`npc.warm`); with
        `wait_s`, return once it is done (`wait_for_warm_ups`)."""
        reply = await self.send(calls.warm(npc_id))
        if wait_s is not None:
            await self.wait_for_warm_ups(wait_s)
        return reply

    async def wait_for_warm_ups(self, wait_s: float) -> None:
        """As `Client.wait_for_warm_ups`: return once no warm-up is pending, `NoReply` after `wait_s`."""
        deadline = time.monotonic() + wait_s
        while (await self.stats()).counters.get("warm.pending", 0):
            if time.monotonic() > deadline:
                raise NoReply(f"warm-ups still pending after {wait_s:g}s")
            await asyncio.sleep(0.05)  # a poll of the sidecar's counter

    async def new_game(self, seed: int | None = None) -> wire.SetStateReply:
        """A new playthrough (`calls.new_game`): a random seed unless one is given (to replay a game)."""
        return await self.send(calls.new_game(seed))

    async def npc_status(self, npc_id: str, *, wait: bool = False) -> wire.NpcStatusReply:
        """Whether the NPC's warm-up is done (`ready`): until then its first line waits for it.
        `wait`: the reply comes once it is done (bounded by the client's reply wait)."""
        return await self.send(calls.npc_status(npc_id, wait))

    async def cancel(self, request_id: int) -> wire.CancelReply:
        """As `Client.cancel`; cancelling the task that awaits `interact` does it without asking."""
        return await self.send(calls.cancel(request_id))

    async def set_state(
        self, values: dict[str, Any], *, npc_id: str | None = None, remove: tuple[str, ...] = ()
    ) -> wire.SetStateReply:
        return await self.send(calls.set_state(values, npc_id, remove))

    async def interact(
        self, npc_id: str | InteractionContext, player_input: str = "", trigger_reason: str = "player_utterance", **fields: Any
    ) -> InteractionResult:
        return await self.send(calls.interact(npc_id, player_input, trigger_reason, fields))

    async def interact_stream(
        self, npc_id: str | InteractionContext, player_input: str = "", trigger_reason: str = "player_utterance", **fields: Any
    ) -> AsyncIterator[wire.InteractChunk | InteractionResult]:
        """One NPC line, streamed: `async for item in lg.interact_stream(...)` gives each
        validated chunk as it is released, then the result (its dialogue is the chunks joined)."""
        call = calls.interact(npc_id, player_input, trigger_reason, fields, stream=True)
        async for envelope in self._exchange(call.message_type, call.body):
            if envelope["type"] == calls.CHUNK_TYPE:
                yield wire.InteractChunk.model_validate(envelope["body"])
            else:
                yield call.parse(envelope["body"])

    async def memory(self, npc_id: str) -> wire.MemoryGetReply:
        return await self.send(calls.memory(npc_id))

    async def save(self, slot: str) -> wire.SlotReply:
        return await self.send(calls.save(slot))

    async def load(self, slot: str) -> wire.SlotReply:
        return await self.send(calls.load(slot))

    async def audit_tail(self, npc_id: str | None = None, limit: int = 20, after: int | None = None) -> wire.AuditTailReply:
        return await self.send(calls.audit_tail(npc_id, limit, after))

    async def audit_export(
        self,
        npc_id: str | None = None,
        last: int | None = None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        form: Literal["document", "json"] = "document",
    ) -> wire.AuditExportReply:
        return await self.send(calls.audit_export(npc_id, last, first_seq, last_seq, form))

    async def scene_start(self, scene_id: str, npcs: list[str] | tuple[str, ...], **fields: Any) -> SceneState:
        """Open a scene (`scene.start`): `npcs` speak in turn; `listeners`, `player_present`,
        `topic`, `max_lines`, `weights`... as `SceneStartRequest` names them."""
        return await self.send(calls.scene_start(scene_id, npcs, fields))

    async def scene_next(
        self, scene_id: str, *, to_end: bool = False, on_chunk: Callable[[SceneChunk], None] | None = None
    ) -> SceneNextReply:
        """The scene's next line (`to_end`: every line to its end). With `on_chunk`, the lines
        stream: each validated chunk is passed to it as it arrives."""
        call = calls.scene_next(scene_id, to_end=to_end, stream=on_chunk is not None)
        async for envelope in self._exchange(call.message_type, call.body):
            if calls.is_chunk(envelope["type"]):
                assert on_chunk is not None
                on_chunk(SceneChunk.model_validate(envelope["body"]))
            else:
                return call.parse(envelope["body"])
        raise AssertionError("unreachable: an exchange ends with a reply or raises")

    async def scene_say(
        self, scene_id: str, text: str, *, kind: Literal["player", "narration"] = "player", to: str | None = None
    ) -> SceneState:
        """Words said into a scene: every NPC there hears and remembers them; `to` answers next."""
        return await self.send(calls.scene_say(scene_id, text, kind, to))

    async def scene_end(self, scene_id: str) -> SceneState:
        return await self.send(calls.scene_end(scene_id))

    async def scene_get(self, scene_id: str) -> SceneState:
        return await self.send(calls.scene_get(scene_id))

    async def stats(self) -> wire.StatsReply:
        return await self.send(calls.stats())

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._socket.close(linger=0)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
