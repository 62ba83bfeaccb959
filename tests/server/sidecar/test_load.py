"""32 concurrent clients x 50 interactions through the sidecar: no lost replies, no mixed-up ids."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from stores import open_store

from loreguard.memory import MemoryStore
from loreguard.server.bench.sidecar import _REPLY, load_npcs, run_load
from loreguard.server.cli import main
from loreguard.server.demo import demo_world
from loreguard.server.inference import ScriptedBackend
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


@pytest.mark.slow
def test_thirty_two_clients_fifty_interactions_each(tmp_path: Path) -> None:
    npcs = load_npcs(32)
    store = open_store(tmp_path / "m.sqlite", world=demo_world(), npcs=npcs)
    sidecar = Sidecar(store, ScriptedBackend([_REPLY], cycle=True), SidecarConfig(port=0, queue_size=64))
    sidecar.start()
    try:
        report = asyncio.run(run_load(sidecar.address, [p.id for p in npcs], 50))
        counters = sidecar.stats.counters()
    finally:
        sidecar.stop()
    assert report.replies == 32 * 50 and report.problems == []
    assert counters["interact.validated"] == 1600 and "errors.overloaded" not in counters
    with MemoryStore(tmp_path / "m.sqlite") as reopened:
        assert all(reopened.interactions(p.id) == 50 for p in npcs)


def test_bench_commands_print_name_value_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "roundtrip", "--round-trips", "200"]) == 0
    assert main(["bench", "load", "--clients", "4", "--per-client", "5"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert float(lines["overhead_ratio"]) > 0 and lines["lost_or_mismatched"] == "0"
