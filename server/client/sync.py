"""The blocking client: one DEALER socket, one request at a time."""

from __future__ import annotations

import itertools
import time
from typing import Any

import zmq

from loreguard.client.api import DEFAULT_ADDRESS, ClientApi
from loreguard.client.errors import NoReply, error_from_envelope
from loreguard.client.messages import parse_reply
from loreguard.server.sidecar.codec import decode_reply, encode_request


class Client(ClientApi):
    def __init__(self, address: str = DEFAULT_ADDRESS, *, timeout_s: float = 120.0, context: zmq.Context | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._socket = (context or zmq.Context.instance()).socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._ids = itertools.count(1)

    def request(self, message_type: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the reply body; raise the typed error on an error reply."""
        request_id = next(self._ids)
        self._socket.send(encode_request(request_id, message_type, body))
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not self._socket.poll(remaining_ms):
                raise NoReply(f"no reply to {message_type} from {self.address} within {self.timeout_s}s")
            envelope = decode_reply(self._socket.recv())
            if envelope.get("id") != request_id:
                continue  # a late reply to a request that already timed out
            if envelope["type"] == "error":
                raise error_from_envelope(envelope)
            return envelope["body"]

    def _call(self, message_type: str, body: dict[str, Any]) -> Any:
        return parse_reply(message_type, self.request(message_type, body))

    def close(self) -> None:
        self._socket.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
