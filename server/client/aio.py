"""The asyncio client: many requests in flight on one socket, replies matched by id."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import zmq
import zmq.asyncio

from loreguard.client.api import DEFAULT_ADDRESS, ClientApi
from loreguard.client.errors import NoReply, error_from_envelope
from loreguard.client.messages import parse_reply
from loreguard.server.sidecar.codec import decode_reply, encode_request


class AsyncClient(ClientApi):
    def __init__(
        self, address: str = DEFAULT_ADDRESS, *, timeout_s: float = 120.0, context: zmq.asyncio.Context | None = None
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._socket = (context or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        while True:
            envelope = decode_reply(await self._socket.recv())
            future = self._pending.pop(envelope.get("id"), None)  # type: ignore[arg-type]
            if future is None or future.done():
                continue
            if envelope["type"] == "error":
                future.set_exception(error_from_envelope(envelope))
            else:
                future.set_result(envelope["body"])

    async def request(self, message_type: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self._socket.send(encode_request(request_id, message_type, body))
        try:
            return await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            raise NoReply(f"no reply to {message_type} from {self.address} within {self.timeout_s}s") from None
        finally:
            self._pending.pop(request_id, None)

    async def _parsed(self, message_type: str, body: dict[str, Any]) -> Any:
        return parse_reply(message_type, await self.request(message_type, body))

    def _call(self, message_type: str, body: dict[str, Any]) -> Any:
        return self._parsed(message_type, body)

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
