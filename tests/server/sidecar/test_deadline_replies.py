"""Deadlines over real ZeroMQ with a slow model: the sidecar answers by its deadline with the NPC's
fallback line and is free at once for the next interaction; the Python client waits as long as
that deadline allows; a client that leaves mid-interaction, or a reply ready only after shutdown,
costs the sidecar no traceback."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
import zmq
from factories import say
from sidecar_helpers import running_sidecar
from waiting import counter, wait_for

from loreguard.client import AsyncClient, Client, Timeout
from loreguard.client.calls import DEADLINE_MARGIN_S, DEFAULT_TIMEOUT_S, reply_wait_s
from loreguard.schemas import InteractionOutcome
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.scene import MAX_SCENE_LINES
from loreguard.schemas.wire import encode_request
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

#: How late past its deadline an answer may come on a loaded machine (the commit and the trip back).
LATE_S = 0.5


class GatedBackend(ScriptedBackend):
    """Each generation waits until the test opens the gate, whatever its deadline (a backend that
    cannot be cut)."""

    def __init__(self) -> None:
        super().__init__([say("Aye.")], cycle=True)
        self.gate = threading.Event()
        self.started = threading.Event()
        self.returned = threading.Event()

    def generate(self, request: GenerationRequest) -> Generation:
        self.started.set()
        assert self.gate.wait(60)
        try:
            return super().generate(request)
        finally:
            self.returned.set()


@pytest.fixture
def thread_failures(monkeypatch: pytest.MonkeyPatch) -> list[threading.ExceptHookArgs]:
    """Exceptions that end any thread (a sidecar worker's traceback) during the test."""
    failures: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    return failures


def test_a_slow_model_answers_the_fallback_line_by_the_deadline_and_the_sidecar_is_free_at_once(tmp_path: Path) -> None:
    backend = ScriptedBackend([say("Well met, traveller.")], cycle=True, latency_s=30.0)
    with running_sidecar(tmp_path, backend, request_timeout_ms=1500) as sidecar, Client(sidecar.address) as client:
        client.hello()
        assert client.deadline_ms == 1500
        started = time.monotonic()
        result = client.interact("guard", "Any news?")
        assert time.monotonic() - started < 1.5 + LATE_S
        assert result.outcome is InteractionOutcome.FALLBACK and result.dialogue == "Move along, traveller."
        assert result.receipt.fallback_reason == "time_budget -> npc_trigger" and result.receipt.attempts == ()
        assert not any("exchange" in e.tags for e in client.memory("guard").memory.episodic)
        # the cut generation holds nothing: the next interaction is the model's own line, at once
        backend.latency_s = 0.0
        started = time.monotonic()
        again = client.interact("guard", "Any news?")
        assert time.monotonic() - started < 1.5 + LATE_S
        assert again.outcome is InteractionOutcome.VALIDATED and again.dialogue == "Well met, traveller."
        # the record of the cut interaction replays to the same decision
        report = Replayer(sidecar.recorder.export(PackageSelection(npc_id="guard"), exported_by="test")).run()
        assert (report.exact_matches, report.drifts) == (2, 0), [r.details for r in report.results]


def test_a_streamed_interaction_the_deadline_cuts_gets_the_fallback_as_one_chunk(tmp_path: Path) -> None:
    backend = ScriptedBackend([say("Well met, traveller.")], cycle=True, latency_s=30.0)
    with running_sidecar(tmp_path, backend, request_timeout_ms=1500) as sidecar, Client(sidecar.address) as client:
        started = time.monotonic()
        items = list(client.interact_stream("guard", "Any news?"))
        assert time.monotonic() - started < 1.5 + LATE_S
        *chunks, result = items
        assert [c.text for c in chunks] == [result.dialogue] == ["Move along, traveller."]  # type: ignore[union-attr]
        assert chunks[0].attempt == 0  # type: ignore[union-attr]


def test_the_clients_wait_follows_the_sidecars_deadline(tmp_path: Path) -> None:
    assert reply_wait_s("interact", {}, 5000) == 5 + DEADLINE_MARGIN_S
    assert reply_wait_s("scene.next", {"to_end": False}, 5000) == 5 + DEADLINE_MARGIN_S
    assert reply_wait_s("scene.next", {"to_end": True}, 5000) == MAX_SCENE_LINES * 5 + DEADLINE_MARGIN_S
    assert reply_wait_s("stats", {}, 5000) == reply_wait_s("interact", {}, None) == DEFAULT_TIMEOUT_S
    with running_sidecar(tmp_path, request_timeout_ms=2500) as sidecar:
        with Client(sidecar.address) as client:
            client.interact("guard", "Hello")  # asks `hello` for the deadline first
            assert client.deadline_ms == 2500
        with Client(sidecar.address, timeout_s=7) as fixed:
            fixed.interact("guard", "Hello again")
            assert fixed.deadline_ms is None  # a wait of its own: no need to ask

        async def scenario() -> int | None:
            async with AsyncClient(sidecar.address) as client:
                await client.interact("merchant", "Hello")
                return client.deadline_ms

        import asyncio

        assert asyncio.run(scenario()) == 2500


def test_a_deadline_passed_in_the_queue_answers_timeout_and_applies_nothing(tmp_path: Path) -> None:
    import asyncio

    backend = GatedBackend()
    with running_sidecar(tmp_path, backend, request_timeout_ms=1000) as sidecar:

        async def scenario() -> tuple[object, BaseException | None]:
            async with AsyncClient(sidecar.address, timeout_s=30) as client:
                first = asyncio.create_task(client.interact("guard", "one"))
                await asyncio.get_running_loop().run_in_executor(None, backend.started.wait, 30)
                sent = time.monotonic()
                second = asyncio.create_task(client.interact("guard", "two"))  # waits behind "one"
                while (await client.stats()).counters.get("interact.queued", 0) < 2 or time.monotonic() - sent < 1.2:
                    await asyncio.sleep(0.01)  # until "two" is queued and its deadline has passed
                backend.gate.set()  # "one" could not be cut: it answers late, with what it had
                done = await first
                try:
                    await second
                except Timeout as exc:
                    return done, exc
                return done, None

        first, error = asyncio.run(scenario())
        assert isinstance(error, Timeout)
        assert sidecar.store.interactions("guard") == 1  # "two" applied nothing


def test_a_client_that_leaves_mid_interaction_costs_no_traceback_and_the_next_is_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, thread_failures: list[threading.ExceptHookArgs]
) -> None:
    backend = GatedBackend()
    caplog.set_level(logging.DEBUG, logger="loreguard")
    with running_sidecar(tmp_path, backend, request_timeout_ms=30_000) as sidecar:
        ctx = zmq.Context()
        leaving = ctx.socket(zmq.DEALER)
        leaving.setsockopt(zmq.LINGER, 0)
        leaving.connect(sidecar.address)
        body = {"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Wait for me."}
        leaving.send(encode_request(1, "interact", body))
        assert backend.started.wait(30)
        leaving.close()
        ctx.term()
        with Client(sidecar.address, timeout_s=30) as client:
            wait_for(lambda: counter(client, "clients.disconnected") >= 1, "the sidecar to see the client leave")
            backend.gate.set()  # its interaction ends; the reply has no one to go to
            wait_for(lambda: counter(client, "interact.validated") >= 1, "the left client's interaction to end")
            assert client.interact("merchant", "Hello").dialogue == "Aye."
    assert thread_failures == []
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_an_interaction_that_outlives_shutdown_ends_with_a_log_line_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, thread_failures: list[threading.ExceptHookArgs]
) -> None:
    from stores import demo_store

    backend = GatedBackend()
    caplog.set_level(logging.INFO, logger="loreguard")
    sidecar = Sidecar(demo_store(tmp_path / "memory.sqlite"), backend, SidecarConfig(port=0, shutdown_grace_s=0.05))
    thread = sidecar.start()
    client = Client(sidecar.address, timeout_s=30)
    try:
        client._socket.send(encode_request(1, "interact", {"npc_id": "guard", "trigger_reason": "player_utterance"}))
        assert backend.started.wait(30)
        sidecar.stop()  # its grace ends with the interaction still running
        thread.join(30)
        assert not thread.is_alive()
        backend.gate.set()  # its commit finds the store closed: one log line, no reply
        counters = sidecar.stats.counters
        wait_for(lambda: counters().get("interact.abandoned_at_shutdown", 0) == 1, "the late interaction to end")
        sidecar._deliver(b"client", b"a chunk or reply handed over after the sockets closed")
        assert counters().get("replies.dropped_after_shutdown", 0) == 1
    finally:
        backend.gate.set()
        client.close()
    assert thread_failures == []
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert any("not answered" in r.getMessage() for r in caplog.records)
    assert any("dropped" in r.getMessage() for r in caplog.records)
