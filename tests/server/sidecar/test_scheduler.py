"""The scheduler through the real sidecar: different NPCs at once, one NPC in arrival order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from factories import say
from sidecar_helpers import running_sidecar
from waiting import wait_for

from loreguard.client import AsyncClient
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest


class ConcurrentGatedBackend(ScriptedBackend):
    """Serves up to `slots` generations at once; each waits until its NPC's gate opens."""

    def __init__(self, slots: int) -> None:
        super().__init__([say("Aye.")], cycle=True)
        self.slots = slots
        self._lock = threading.Lock()
        self.gates: dict[str, threading.Event] = {}
        self.running: list[str] = []
        self.started: list[str] = []
        self.peak = 0

    @property
    def max_concurrency(self) -> int:
        return self.slots

    def gate(self, npc_id: str) -> threading.Event:
        with self._lock:
            return self.gates.setdefault(npc_id, threading.Event())

    def generate(self, request: GenerationRequest) -> Generation:
        gate = self.gate(request.npc_id)
        with self._lock:
            self.started.append(request.npc_id)
            self.running.append(request.npc_id)
            self.peak = max(self.peak, len(self.running))
        assert gate.wait(60), f"the gate of {request.npc_id} never opened"
        with self._lock:
            self.running.remove(request.npc_id)
            return super().generate(request)


def test_different_npcs_run_at_once_and_one_npc_waits_its_turn(tmp_path: Path) -> None:
    backend = ConcurrentGatedBackend(slots=4)
    with running_sidecar(tmp_path, backend) as sidecar:
        assert sidecar.worker.workers == 4

        async def scenario():
            async with AsyncClient(sidecar.address, timeout_s=60) as client:
                guard_1 = asyncio.create_task(client.interact("guard", "first"))
                merchant = asyncio.create_task(client.interact("merchant", "hello"))
                guard_2 = asyncio.create_task(client.interact("guard", "second"))
                loop = asyncio.get_running_loop()
                # Both NPCs are inside the model at the same time...
                await loop.run_in_executor(
                    None, wait_for, lambda: sorted(backend.running) == ["guard", "merchant"], "two NPCs at once"
                )
                # ...and the guard's second line waits for its first, though a worker is free.
                assert backend.started.count("guard") == 1
                backend.gate("merchant").set()
                await merchant
                assert backend.started.count("guard") == 1
                backend.gate("guard").set()
                return await guard_1, await guard_2

        first, second = asyncio.run(scenario())
        assert (first.receipt.interaction_index, second.receipt.interaction_index) == (0, 1)
        assert backend.peak == 2


def test_many_npcs_at_once_commit_every_interaction_with_its_record(tmp_path: Path) -> None:
    backend = ConcurrentGatedBackend(slots=8)
    for npc in ("guard", "merchant"):
        backend.gate(npc).set()
    with running_sidecar(tmp_path, backend) as sidecar:

        async def scenario():
            async with AsyncClient(sidecar.address, timeout_s=60) as client:
                asks = [client.interact(npc, f"line {i}") for i in range(10) for npc in ("guard", "merchant")]
                return await asyncio.gather(*asks)

        results = asyncio.run(scenario())
        for npc in ("guard", "merchant"):
            mine = [r for r in results if r.npc_id == npc]
            assert [r.receipt.interaction_index for r in mine] == list(range(10))
        assert all(r.audit_record_id for r in results)
        records = sidecar.recorder.tail(limit=100)
        assert len({r.record_id for r in records}) == 20


def test_interactions_that_overlapped_replay_exactly(tmp_path: Path) -> None:
    from loreguard.schemas.audit import PackageSelection
    from loreguard.server.audit.replay import Replayer

    backend = ConcurrentGatedBackend(slots=2)
    backend.gate("merchant").set()
    with running_sidecar(tmp_path, backend) as sidecar:

        async def scenario():
            async with AsyncClient(sidecar.address, timeout_s=60) as client:
                guard = asyncio.create_task(client.interact("guard", "Evening."))
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, wait_for, lambda: backend.running == ["guard"], "the guard inside the model")
                # The merchant's whole interaction commits while the guard's is between its read
                # of memory and its commit: the guard's writes get later sequence numbers.
                await client.interact("merchant", "Any lanterns?")
                backend.gate("guard").set()
                return await guard

        guard = asyncio.run(scenario())
        assert guard.audit_record_id == "r2"
        package = sidecar.recorder.export(PackageSelection(), exported_by="test")
    report = Replayer(package).run()
    assert (report.exact_matches, report.drifts) == (2, 0), [r.details for r in report.results]
