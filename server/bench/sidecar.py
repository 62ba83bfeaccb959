"""`loreguard bench roundtrip` and `loreguard bench load`: the sidecar over real loopback sockets.

roundtrip: `hello` round trips through the sidecar against a raw pyzmq DEALER/ROUTER echo of the
same sizes, in the same run; `overhead_ratio` is the ratio of the medians.
load: many concurrent asyncio clients, each running interactions for its own NPC through the
scripted model; throughput and latency percentiles, with every reply checked.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from loreguard.client import AsyncClient, Client
from loreguard.memory import MemoryStore
from loreguard.schemas import NpcProfile
from loreguard.schemas.wire import encode_reply, encode_request
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference import ScriptedBackend
from loreguard.server.sidecar.stats import percentile
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

_REPLY = '{"dialogue": "Well met, traveller.", "emotion": "neutral", "mutations": []}'


class _Echo:
    """The baseline: a bare ROUTER that answers every request with a fixed frame."""

    def __init__(self, context: zmq.Context, reply: bytes) -> None:
        self._router = context.socket(zmq.ROUTER)
        port = self._router.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self._reply = reply
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._router.poll(100):
                client, _ = self._router.recv_multipart()
                self._router.send_multipart([client, self._reply])
        self._router.close(linger=0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _time_round_trips(sock: zmq.Socket, frame: bytes, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        sock.send(frame)
        sock.recv()
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


def bench_roundtrip(*, round_trips: int = 5000) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        sidecar = Sidecar(MemoryStore(Path(tmp) / "m.sqlite"), ScriptedBackend([_REPLY], cycle=True), SidecarConfig(port=0))
        sidecar.start()
        try:
            request = encode_request(1, "hello", {"client": "bench"})
            with Client(sidecar.address) as client:
                reply = encode_reply(1, "hello", client.hello())
            context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(sidecar.address)
            _time_round_trips(sock, request, 200)  # warm-up
            sidecar_us = _time_round_trips(sock, request, round_trips)
            sock.close()

            echo = _Echo(context, reply)
            raw = context.socket(zmq.DEALER)
            raw.setsockopt(zmq.LINGER, 0)
            raw.connect(echo.address)
            _time_round_trips(raw, request, 200)
            echo_us = _time_round_trips(raw, request, round_trips)
            raw.close()
            echo.close()
        finally:
            sidecar.stop()
    p50, raw_p50 = statistics.median(sidecar_us), statistics.median(echo_us)
    return {
        "round_trips": round_trips,
        "request_bytes": len(request),
        "reply_bytes": len(reply),
        "roundtrip_p50_us": round(p50, 1),
        "roundtrip_p99_us": round(percentile(sidecar_us, 0.99), 1),
        "raw_echo_p50_us": round(raw_p50, 1),
        "raw_echo_p99_us": round(percentile(echo_us, 0.99), 1),
        "overhead_ratio": round(p50 / raw_p50, 2),
    }


@dataclass
class LoadReport:
    latencies_ms: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    replies: int = 0
    wall_s: float = 0.0


def load_npcs(n: int) -> list[NpcProfile]:
    guard = demo_npcs()[0]
    return [guard.model_copy(update={"id": f"npc_{i:02d}", "name": f"Guard {i}"}) for i in range(n)]


async def run_load(address: str, npcs: list[str], per_client: int) -> LoadReport:
    """One asyncio client per NPC, `per_client` interactions each, all clients at once."""
    report = LoadReport()

    async def one_client(npc_id: str) -> None:
        async with AsyncClient(address, timeout_s=120) as client:
            for i in range(per_client):
                start = time.perf_counter()
                result = await client.interact(npc_id, f"request {i} from {npc_id}")
                report.latencies_ms.append((time.perf_counter() - start) * 1000)
                report.replies += 1
                if result.npc_id != npc_id or result.receipt.interaction_index != i:
                    report.problems.append(f"{npc_id} request {i} got {result.npc_id} #{result.receipt.interaction_index}")

    start = time.perf_counter()
    await asyncio.gather(*(one_client(npc) for npc in npcs))
    report.wall_s = time.perf_counter() - start
    return report


def bench_load(*, clients: int = 32, per_client: int = 50) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "m.sqlite")
        store.load_world(demo_world())
        npcs = load_npcs(clients)
        for profile in npcs:
            store.register_npc(profile)
        sidecar = Sidecar(store, ScriptedBackend([_REPLY], cycle=True), SidecarConfig(port=0, queue_size=clients * 2))
        sidecar.start()
        try:
            report = asyncio.run(run_load(sidecar.address, [p.id for p in npcs], per_client))
        finally:
            sidecar.stop()
    return {
        "clients": clients,
        "interactions": report.replies,
        "lost_or_mismatched": clients * per_client - report.replies + len(report.problems),
        "throughput_per_s": round(report.replies / report.wall_s, 1),
        "latency_p50_ms": round(statistics.median(report.latencies_ms), 2),
        "latency_p99_ms": round(percentile(report.latencies_ms, 0.99), 2),
    }
