"""`interact.cancel` and `scene.end` over real ZeroMQ: a queued request is dropped, one generating
stops at its next token, one finished stays as it was; nothing cancelled is remembered, the audit
record says who cancelled and where, and a package holding cancels replays with no drift."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import zmq
from factories import say
from sidecar_helpers import running_sidecar
from waiting import counter, wait_for

from loreguard.client import AsyncClient, Client, NotFound
from loreguard.client.errors import Cancelled
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.receipt import InteractionOutcome
from loreguard.schemas.wire import decode_reply, encode_request
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest, Observer

LINE = "Well met, traveller. The road north is clear. Mind the wolves on the way."


class HeldBackend(ScriptedBackend):
    """Decodes its script a character at a time, holding after the first few characters until
    the test opens `gate`: a generation caught mid-line. Says how far each one got."""

    def __init__(self, lines: list[str] | None = None) -> None:
        super().__init__([say(line) for line in (lines or [LINE])], cycle=True)
        self.hold = True
        #: Hold once the output so far ends with this (a sentence streamed), else at 20 characters.
        self.hold_after: str | None = None
        self.gate = threading.Event()
        self.holding = threading.Event()
        #: Characters shown when each generation ended, and how it ended.
        self.ended: list[tuple[int, str]] = []

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        text = self.generate(request).text
        for end in range(1, len(text) + 1):
            if not observe(text[:end]):
                self.ended.append((end, "aborted"))
                return Generation(text=text[:end], finish_reason="aborted")
            held = text[:end].endswith(self.hold_after) if self.hold_after else end == 20
            if held and self.hold:
                self.holding.set()
                assert self.gate.wait(60)
        self.ended.append((len(text), "stop"))
        return Generation(text=text)


def _raw(sidecar_address: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(sidecar_address)
    return sock


def _envelope(sock: zmq.Socket, request_id: object) -> dict:
    """The next envelope answering `request_id` (others are skipped)."""
    while True:
        assert sock.poll(60_000), f"no reply to {request_id!r}"
        envelope = decode_reply(sock.recv())
        if envelope["id"] == request_id:
            return envelope


def _interact(sock: zmq.Socket, request_id: object, npc: str, line: str) -> None:
    sock.send(encode_request(request_id, "interact", {"npc_id": npc, "trigger_reason": "player_utterance", "player_input": line}))


def _cancel(sock: zmq.Socket, request_id: object) -> dict:
    sock.send(encode_request(f"cancel-{request_id}", "interact.cancel", {"request_id": request_id}))
    return _envelope(sock, f"cancel-{request_id}")


def test_a_generating_interaction_stops_at_its_next_token_and_nothing_is_remembered(tmp_path: Path) -> None:
    backend = HeldBackend()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as watcher:
        before = watcher.memory("guard")
        sock = _raw(sidecar.address)
        try:
            _interact(sock, 1, "guard", "Open the gate, please.")
            assert backend.holding.wait(60)
            cancel = _cancel(sock, 1)
            assert cancel["type"] == "interact.cancel.ok", cancel
            assert cancel["body"] == {"request_id": 1, "state": "cancelled", "was": "running"}
            backend.gate.set()
            error = _envelope(sock, 1)
        finally:
            sock.close()
        assert error["type"] == "error" and error["body"]["code"] == "cancelled"
        assert error["body"]["details"]["by"] == "game" and error["body"]["details"]["phase"] == "inference.1"
        assert backend.ended == [(21, "aborted")], "the generation ran on past the cancel"
        after = watcher.memory("guard")
        assert after.memory_hash == before.memory_hash and after.interactions == before.interactions == 0
        record = watcher.audit_tail("guard").records[-1]
        assert record.record_id == error["body"]["details"]["audit_record_id"]
        assert record.receipt.outcome is InteractionOutcome.CANCELLED and record.receipt.attempts == ()
        assert record.receipt.cancelled is not None
        assert (record.receipt.cancelled.by, record.receipt.cancelled.phase) == ("game", "inference.1")
        assert record.receipt.memory_hash_after == record.receipt.memory_hash_before
        # The player's next line starts at once, and is the NPC's first remembered one.
        backend.hold = False
        result = watcher.interact("guard", "Are you still there?")
        assert result.outcome is InteractionOutcome.VALIDATED and watcher.memory("guard").interactions == 1


def test_a_queued_interaction_is_dropped_and_answered_at_once(tmp_path: Path) -> None:
    backend = HeldBackend()
    # One worker: the merchant's line waits behind the guard's.
    with running_sidecar(tmp_path, backend, workers=1) as sidecar, Client(sidecar.address, timeout_s=60) as watcher:
        sock = _raw(sidecar.address)
        try:
            _interact(sock, "a", "guard", "Hello.")
            assert backend.holding.wait(60)
            _interact(sock, "b", "merchant", "Bread, please.")
            wait_for(lambda: counter(watcher, "interact.queued") == 2, "the merchant's line to be queued")
            assert _cancel(sock, "b")["body"] == {"request_id": "b", "state": "cancelled", "was": "queued"}
            error = _envelope(sock, "b")  # before the guard's line ends
            assert error["body"]["code"] == "cancelled" and error["body"]["details"]["phase"] == "queued"
            backend.gate.set()
            assert _envelope(sock, "a")["type"] == "interact.ok"
            # Finished: the cancel comes too late, and says so; a request never sent is not found.
            assert _cancel(sock, "a")["body"] == {"request_id": "a", "state": "finished", "was": "finished"}
            assert _cancel(sock, "zzz")["body"]["code"] == "not_found"
        finally:
            sock.close()
        assert len(backend.ended) == 1, "the dropped line was generated"
        assert watcher.memory("merchant").interactions == 0 and watcher.memory("guard").interactions == 1
        assert counter(watcher, "interact.cancelled_queued") == 1


def test_another_clients_request_cannot_be_cancelled(tmp_path: Path) -> None:
    backend = HeldBackend()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as other:
        sock = _raw(sidecar.address)
        try:
            _interact(sock, 1, "guard", "Hello.")
            assert backend.holding.wait(60)
            with pytest.raises(NotFound):
                other.cancel(1)
            backend.gate.set()
            assert _envelope(sock, 1)["type"] == "interact.ok"
        finally:
            sock.close()


def test_a_cancel_after_the_reply_was_ready_commits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last place a cancel lands: the gate passed the reply, and the commit is refused."""
    from loreguard.server.pipeline import lifecycle

    reached = threading.Event()
    go_on = threading.Event()
    claim = lifecycle.GovernancePipeline._claim_commit

    def slow_claim(run: object) -> None:
        reached.set()
        assert go_on.wait(60)
        claim(run)  # type: ignore[arg-type]

    monkeypatch.setattr(lifecycle.GovernancePipeline, "_claim_commit", staticmethod(slow_claim))
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=60) as watcher:
        sock = _raw(sidecar.address)
        try:
            _interact(sock, 9, "guard", "Hello.")
            assert reached.wait(60)
            assert _cancel(sock, 9)["body"]["was"] == "running"
            go_on.set()
            error = _envelope(sock, 9)
        finally:
            sock.close()
        assert error["body"]["details"]["phase"] == "commit"
        assert watcher.memory("guard").interactions == 0
        record = watcher.audit_tail("guard").records[-1]
        assert record.receipt.cancelled is not None and record.receipt.cancelled.phase == "commit"
        assert len(record.receipt.attempts) == 1  # the reply the gate passed, kept in the record
        package = sidecar.recorder.export(PackageSelection(), exported_by="test")
    report = Replayer(package).run()  # the replay passes the same reply and stops at the commit
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]


def test_a_package_with_cancels_replays_with_no_drift(tmp_path: Path) -> None:
    backend = HeldBackend([LINE, "The market opens at dawn, love."])
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        sock = _raw(sidecar.address)
        try:
            _interact(sock, 1, "guard", "Hello.")
            assert backend.holding.wait(60)
            _cancel(sock, 1)
            backend.gate.set()
            _envelope(sock, 1)
        finally:
            sock.close()
        backend.hold = False
        client.interact("merchant", "When does the market open?")
        client.interact("guard", "Hello again.")
        package = sidecar.recorder.export(PackageSelection(), exported_by="test")
    outcomes = [r.receipt.outcome for r in package.records]
    assert outcomes == [InteractionOutcome.CANCELLED, InteractionOutcome.VALIDATED, InteractionOutcome.VALIDATED]
    report = Replayer(package).run()
    assert (report.exact_matches, report.drifts) == (3, 0), [r.details for r in report.results]


def test_a_scene_line_is_not_remembered_once_the_scene_ended(tmp_path: Path) -> None:
    backend = HeldBackend(["Hmph. Another traveller at the gate.", "Evening, Brom. Cold night for it."])
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        before = {npc: client.memory(npc).memory_hash for npc in ("guard", "merchant")}
        client.scene_start("gate-talk", ["guard", "merchant"], topic="At the north gate at dusk.")
        sock = _raw(sidecar.address)
        try:
            sock.send(encode_request(5, "scene.next", {"scene_id": "gate-talk"}))
            assert backend.holding.wait(60)
            ended = client.scene_end("gate-talk")
            backend.gate.set()
            error = _envelope(sock, 5)
        finally:
            sock.close()
        assert ended.ended
        assert error["body"]["code"] == "cancelled" and error["body"]["details"]["by"] == "scene_end"
        assert {npc: client.memory(npc).memory_hash for npc in ("guard", "merchant")} == before
        record = client.audit_tail().records[-1]
        assert record.receipt.cancelled is not None and record.receipt.cancelled.by == "scene_end"


def test_the_clients_cancel_a_line_nobody_waits_for(tmp_path: Path) -> None:
    backend = HeldBackend()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as watcher:
        # A stream left early (`break`): the sync client cancels it.
        backend.hold_after = "traveller. "
        with Client(sidecar.address, timeout_s=60) as leaver:
            stream = leaver.interact_stream("guard", "Hello.")
            for _chunk in stream:
                break  # the first sentence is out, and the generation holds after it
            stream.close()
            wait_for(lambda: counter(watcher, "cancel.running") == 1, "the left stream's cancel")
            backend.gate.set()
            wait_for(lambda: counter(watcher, "interact.cancelled_game") == 1, "the left stream to be cancelled")
        assert backend.ended[-1][1] == "aborted"
        # A task awaiting `interact`, cancelled: the async client cancels the line.
        backend.hold_after = None
        backend.gate.clear()
        backend.holding.clear()

        async def walk_away() -> None:
            async with AsyncClient(sidecar.address, timeout_s=60) as client:
                task = asyncio.create_task(client.interact("merchant", "Bread, please."))
                assert await asyncio.to_thread(backend.holding.wait, 60)  # the line is being generated
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await client.stats()  # the cancel went out before this request

        asyncio.run(walk_away())
        wait_for(lambda: counter(watcher, "cancel.running") == 2, "the async client's cancel")
        backend.gate.set()
        wait_for(lambda: counter(watcher, "interact.cancelled_game") == 2, "the awaited line to be cancelled")
        assert watcher.memory("guard").interactions == watcher.memory("merchant").interactions == 0


def test_a_cancelled_error_is_typed(tmp_path: Path) -> None:
    backend = HeldBackend()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        caught: list[BaseException] = []

        def ask() -> None:
            with Client(sidecar.address, timeout_s=60) as asker:
                try:
                    asker.interact("guard", "Hello.")
                except Cancelled as exc:
                    caught.append(exc)

        asking = threading.Thread(target=ask)
        asking.start()
        assert backend.holding.wait(60)
        # Another socket cannot cancel it; the sidecar's own view of the requests shows it running.
        assert counter(client, "interact.queued") == 1
        sidecar.worker.end_scene("none")  # no scene: nothing cancelled
        jobs = list(sidecar.worker._live.values())  # the test reaches in for the asker's identity
        assert sidecar.worker.cancel(jobs[0].client, jobs[0].request_id) == "running"
        backend.gate.set()
        asking.join(60)
        assert len(caught) == 1 and caught[0].by == "game" and caught[0].phase == "inference.1"  # type: ignore[attr-defined]
