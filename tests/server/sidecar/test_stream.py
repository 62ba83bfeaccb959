"""Streamed `interact` over real ZeroMQ: chunks with the request's id, then one reply; typed
errors for a bad `stream`; a client that leaves mid-stream stops the generation."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import zmq
from factories import say
from sidecar_helpers import running_sidecar
from waiting import counter, wait_for

from loreguard.client import AsyncClient, Client, Invalid
from loreguard.schemas import InteractionResult
from loreguard.schemas.wire import InteractChunk, decode_reply, encode_request
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest, Observer

LINE = "Well met, traveller. The road north is clear. Mind the wolves."


class PausingBackend(ScriptedBackend):
    """Streams its script in pieces, but stops after the first sentence until the test opens
    `gate`; records whether the generation was stopped."""

    def __init__(self) -> None:
        super().__init__([say(LINE)], cycle=True)
        self.gate = threading.Event()
        self.paused = threading.Event()
        self.aborted = threading.Event()

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        text = self.generate(request).text
        for end in range(1, len(text) + 1):
            if not observe(text[:end]):
                self.aborted.set()
                return Generation(text=text[:end], finish_reason="aborted")
            if end == text.index(". ") + 2:  # the first sentence is out
                self.paused.set()
                assert self.gate.wait(60)
        return Generation(text=text)


def test_chunks_come_in_order_with_the_request_id_then_the_reply(tmp_path: Path) -> None:
    backend = ScriptedBackend([say(LINE)], cycle=True)
    with running_sidecar(tmp_path, backend) as sidecar:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(sidecar.address)
        try:
            body = {"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Hello", "stream": True}
            sock.send(encode_request("req-7", "interact", body))
            envelopes = []
            while not envelopes or envelopes[-1]["type"] == "interact.chunk":
                assert sock.poll(60_000), "no reply from the sidecar"
                envelopes.append(decode_reply(sock.recv()))
        finally:
            sock.close()
            ctx.term()
    assert {e["id"] for e in envelopes} == {"req-7"}
    assert envelopes[-1]["type"] == "interact.ok"
    chunks = [InteractChunk.model_validate(e["body"]) for e in envelopes[:-1]]
    assert [c.seq for c in chunks] == [0, 1, 2] and {c.attempt for c in chunks} == {1}
    result = InteractionResult.model_validate(envelopes[-1]["body"])
    assert "".join(c.text for c in chunks) == result.dialogue == LINE


def test_the_python_clients_stream(tmp_path: Path) -> None:
    backend = ScriptedBackend([say(LINE)], cycle=True)
    with running_sidecar(tmp_path, backend) as sidecar:
        with Client(sidecar.address, timeout_s=60) as client:
            items = list(client.interact_stream("guard", "Hello"))
            seen: list[InteractChunk] = []
            # the same player line each time: the same answer to it is no self-repeat
            result = client.interact("guard", "Hello", on_chunk=seen.append)
            plain = client.interact("guard", "Hello")  # no stream: one reply, as before
        assert isinstance(items[-1], InteractionResult)
        assert "".join(i.text for i in items[:-1]) == items[-1].dialogue  # type: ignore[union-attr]
        assert "".join(c.text for c in seen) == result.dialogue == plain.dialogue == LINE

        async def run() -> list[object]:
            async with AsyncClient(sidecar.address, timeout_s=60) as client:
                got = [item async for item in client.interact_stream("guard", "Hello")]
                both = await asyncio.gather(client.interact("guard", "x"), client.interact("merchant", "y"))
                return got + list(both)

        got = asyncio.run(run())
        assert [type(i).__name__ for i in got[:4]] == ["InteractChunk"] * 3 + ["InteractionResult"]
        assert all(isinstance(i, InteractionResult) for i in got[4:])


@pytest.mark.parametrize("value", ["yes", 1, None, [True]])
def test_a_stream_of_the_wrong_type_is_invalid(tmp_path: Path, value: object) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        with pytest.raises(Invalid) as caught:
            client.request("interact", {"npc_id": "guard", "trigger_reason": "player_utterance", "stream": value})
        assert caught.value.details is not None
        assert [e["path"] for e in caught.value.details["errors"]] == ["stream"]
        assert counter(client, "interact.queued") == 0


def test_a_client_that_leaves_mid_stream_stops_the_generation(tmp_path: Path) -> None:
    backend = PausingBackend()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as watcher:
        before = watcher.memory("guard").memory_hash
        # A raw socket, which (unlike the clients, `test_cancel`) sends no `interact.cancel`.
        leaver = zmq.Context.instance().socket(zmq.DEALER)
        leaver.setsockopt(zmq.LINGER, 0)
        leaver.connect(sidecar.address)
        body = {"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Hello", "stream": True}
        leaver.send(encode_request(1, "interact", body))
        assert leaver.poll(60_000)
        first = InteractChunk.model_validate(decode_reply(leaver.recv())["body"])
        assert first.text == "Well met, traveller."
        assert backend.paused.wait(60)
        leaver.close()
        wait_for(lambda: counter(watcher, "clients.disconnected") == 1, "the sidecar to see the client leave")
        backend.gate.set()
        assert backend.aborted.wait(60), "the generation was not stopped"
        wait_for(lambda: counter(watcher, "interact.cancelled_disconnected") == 1, "the interaction to be cancelled")
        assert watcher.memory("guard").memory_hash == before  # nothing applied
        assert watcher.memory("guard").interactions == 0
