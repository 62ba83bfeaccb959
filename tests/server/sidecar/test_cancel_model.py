"""A cancel against the embedded model through ZeroMQ: the generation stops, nothing of the line
is remembered, the audit record says cancelled, and the player's next line is answered."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq
from sidecar_helpers import running_sidecar

from loreguard.client import Client
from loreguard.schemas.receipt import InteractionOutcome
from loreguard.schemas.wire import decode_reply, encode_request

pytestmark = pytest.mark.model


def _reply(sock: zmq.Socket, request_id: object) -> dict:
    while True:
        assert sock.poll(120_000), f"no reply to {request_id!r}"
        envelope = decode_reply(sock.recv())
        if envelope["id"] == request_id and envelope["type"] != "interact.chunk":
            return envelope


def test_a_cancelled_line_on_the_real_model_stops_and_is_not_remembered(tmp_path: Path, llama_backend) -> None:
    with running_sidecar(tmp_path, llama_backend) as sidecar, Client(sidecar.address, timeout_s=120) as watcher:
        before = watcher.memory("merchant")
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(sidecar.address)
        try:
            line = "Tell me about each of your wares, one by one, and where they come from."
            body = {"npc_id": "merchant", "trigger_reason": "player_utterance", "player_input": line, "stream": True}
            sock.send(encode_request(1, "interact", body))
            assert sock.poll(120_000)
            first = decode_reply(sock.recv())
            assert first["type"] == "interact.chunk", first  # the line is being generated
            sock.send(encode_request(2, "interact.cancel", {"request_id": 1}))
            cancel = _reply(sock, 2)
            asked = time.perf_counter()
            error = _reply(sock, 1)
            stopped_s = time.perf_counter() - asked
        finally:
            sock.close()
        assert cancel["body"] == {"request_id": 1, "state": "cancelled", "was": "running"}, cancel
        assert error["type"] == "error" and error["body"]["code"] == "cancelled", error
        print(f"stopped {stopped_s * 1000:.0f} ms after the cancel was acknowledged")
        after = watcher.memory("merchant")
        assert after.memory_hash == before.memory_hash and after.interactions == 0
        record = watcher.audit_tail("merchant").records[-1]
        assert record.receipt.outcome is InteractionOutcome.CANCELLED and record.receipt.cancelled is not None
        assert record.receipt.memory_hash_after == record.receipt.memory_hash_before
        # The next line is answered, and is the first the merchant remembers.
        result = watcher.interact("merchant", "Do you sell rope?")
        assert result.outcome in (InteractionOutcome.VALIDATED, InteractionOutcome.FALLBACK)
        assert watcher.memory("merchant").interactions == 1
