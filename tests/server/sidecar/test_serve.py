"""`loreguard serve` as a real process: clean shutdown on signals, durability across SIGKILL."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from factories import say
from serve_process import remembering_script as _script
from serve_process import start_serve as _start
from sidecar_helpers import free_port

from loreguard.client import AsyncClient, Client, NoReply
from loreguard.memory import MemoryStore
from loreguard.server.demo import demo_npcs, demo_world

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_shut_down_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    process = _start(tmp_path / "data", port, _script(tmp_path))
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=10) as client:
        client.load_world(demo_world())
        client.register_npc(demo_npcs()[0])
        acknowledged = client.interact("guard", "Hello.")
        process.send_signal(sig)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "stopped" in output
    with MemoryStore(tmp_path / "data" / "memory.sqlite") as store:
        assert store.interactions("guard") == 1
        assert store.memory_hash(("guard", "@world")) == acknowledged.receipt.memory_hash_after


def test_acknowledged_interactions_survive_sigkill(tmp_path: Path) -> None:
    port, data, script = free_port(), tmp_path / "data", _script(tmp_path)
    address = f"tcp://127.0.0.1:{port}"
    process = _start(data, port, script)
    with Client(address, timeout_s=10) as client:
        client.load_world(demo_world())
        client.register_npc(demo_npcs()[0])

    async def stream() -> list[int]:
        """Eight interactions in flight at a time; SIGKILL once 150 are acknowledged."""
        acknowledged: list[int] = []
        async with AsyncClient(address, timeout_s=3) as client:

            async def one(i: int) -> None:
                try:
                    result = await client.interact("guard", f"line {i}")
                except NoReply:
                    return
                acknowledged.append(result.receipt.interaction_index)
                if len(acknowledged) == 150:
                    process.kill()

            for start in range(0, 400, 8):
                await asyncio.gather(*(one(i) for i in range(start, start + 8)))
                if process.poll() is not None:
                    break
        return acknowledged

    acknowledged = asyncio.run(stream())
    process.communicate(timeout=30)
    assert 150 <= len(acknowledged) < 400

    process = _start(data, port, script)
    try:
        with Client(address, timeout_s=10) as client:
            memory = client.memory("guard")
            # Every acknowledged interaction committed (the ones in flight at the kill may have
            # committed too; their replies died with the process).
            assert memory.interactions >= len(acknowledged) and max(acknowledged) < memory.interactions
            written: dict[int, int] = {}
            for entry in memory.memory.episodic:
                written[entry.at_interaction] = written.get(entry.at_interaction, 0) + 1
            # Each interaction writes two entries in one transaction: the latest 100 (older ones
            # may be pruned by decay) have both, never one.
            for index in range(memory.interactions - 100, memory.interactions):
                assert written.get(index) == 2, f"interaction {index} lost or half-applied"
            assert client.interact("guard", "After the crash.").receipt.interaction_index == memory.interactions
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)


@pytest.mark.parametrize("judge", ["auto", "off", "keyword"])
def test_serve_switches_the_semantic_judge_on(tmp_path: Path, judge: str) -> None:
    port = free_port()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([say("Beware the dragon in the hills, traveller.")] * 3))
    process = _start(tmp_path / "data", port, script, "--judge", judge)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=10) as client:
            client.load_world(demo_world())
            client.register_npc(demo_npcs()[0])
            result = client.interact("guard", "Anything odd out there?")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    gates = {check.gate.value for attempt in result.receipt.attempts for check in attempt.gates}
    assert ("semantic" in gates) is (judge == "keyword")
    assert ("semantic judge: keyword check" in output) is (judge == "keyword")


def test_auto_asks_the_judge_for_a_judge_capable_catalogue_model_on_a_gpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from loreguard.server.models.catalogue import load_catalogue
    from loreguard.server.sidecar import cli
    from loreguard.server.sidecar.cli import _judge_setup

    args = argparse.Namespace(
        judge="auto", judge_model=None, judge_url=None, judge_timeout_ms=3000, backend="llama", device="auto", gpu_layers=None
    )
    # on the CPU (device auto): the judge would about double the wait for each reply, so it stays off and says so
    on_cpu = _judge_setup(args, "qwen2.5-1.5b")
    assert on_cpu.mode == "off" and "about double the wait" in on_cpu.off_because
    monkeypatch.setattr(cli, "_on_gpu", lambda args: True)
    assert _judge_setup(args, "qwen2.5-1.5b").mode == "model"
    assert _judge_setup(args, "qwen2.5-coder-1.5b").mode == "off"  # measured: it refused good lines
    assert _judge_setup(args, "qwen2.5-0.5b").mode == "off"
    assert _judge_setup(args, "SmolLM2-135M-Instruct-Q8_0.gguf").mode == "off"  # the embedded model
    assert _judge_setup(argparse.Namespace(**{**vars(args), "backend": "openai"}), "qwen2.5-1.5b").mode == "off"
    # the bar: 1.5B parameters and up, unless measured otherwise
    measured_off = {"qwen2.5-coder-1.5b"}
    assert all(
        m.judge_capable == (float(m.params.rstrip("B")) >= 1.5 and m.name not in measured_off) for m in load_catalogue().models
    )


def test_a_judge_model_needs_a_model_to_ask(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loreguard.server.cli", "serve", "--backend", "scripted", "--script", str(_script(tmp_path)),
         "--judge", "keyword", "--judge-url", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "--judge-url need --judge model" in done.stderr


def test_a_port_already_taken_is_one_line_and_exit_code_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a launcher shows (and the addon retries: a sidecar still shutting down frees it)."""
    import socket

    from loreguard.server.cli import main

    script = tmp_path / "script.json"
    script.write_text(json.dumps([say("Hm.")]))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--port", str(port), "--backend", "scripted", "--script", str(script), "--data", str(tmp_path / "d")]
        assert main(argv) == 4
    last = capsys.readouterr().err.splitlines()[-1]  # after the loading line
    assert last == f"loreguard: cannot listen on tcp://127.0.0.1:{port}: the address is already in use"
