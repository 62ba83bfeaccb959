"""`npc.status` over real ZeroMQ: `ready` once the NPC's warm-up is done; with `wait`, the reply
itself waits for that (no polling), and an NPC never registered is `not_found`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import zmq
from sidecar_helpers import running_sidecar
from waiting import counter, wait_for

from loreguard.client import Client, NotFound
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.wire import decode_reply, encode_request
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import WarmResult


class SlowWarm(ScriptedBackend):
    """Its warm-up of the guard holds until the test opens `gate`."""

    def __init__(self) -> None:
        super().__init__([], cycle=True)
        self.gate = threading.Event()
        self.warming = threading.Event()

    def warm(self, npc_id: str, prompt: Prompt, *, alongside: bool = False) -> WarmResult:
        self.warming.set()
        assert self.gate.wait(60)
        return WarmResult(outcome="warmed")


def test_a_waiting_status_is_answered_when_the_warm_up_is_done(tmp_path: Path) -> None:
    backend = SlowWarm()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        assert client.npc_status("guard").ready  # nothing asked for: nothing to wait for
        client.warm("guard")
        assert backend.warming.wait(60)
        assert not client.npc_status("guard").ready and client.npc_status("merchant").ready
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(sidecar.address)
        try:
            sock.send(encode_request(1, "npc.status", {"npc_id": "guard", "wait": True}))
            wait_for(lambda: counter(client, "npc.status.waits") == 1, "the waiting status request to arrive")
            assert not sock.poll(0), "answered before the warm-up was done"
            backend.gate.set()
            assert sock.poll(60_000), "no answer once the warm-up was done"
            reply = decode_reply(sock.recv())
        finally:
            sock.close()
        assert reply["type"] == "npc.status.ok" and reply["body"]["ready"] is True
        assert client.npc_status("guard", wait=True).ready  # warm already: at once
        with pytest.raises(NotFound):
            client.npc_status("nobody", wait=True)
