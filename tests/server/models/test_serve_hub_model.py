"""`loreguard serve --model hf:…` as a real process: pulled from the (fake) Hub, then served with
the real sidecar and the real model."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_hub import FILE, REFERENCE, FakeHub
from sidecar_helpers import free_port
from waiting import wait_for

from loreguard.client import Client, NoReply
from loreguard.server.demo import demo_npcs, demo_world


def _serve(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "loreguard.server.cli", "serve", "--model", REFERENCE, "--data", str(tmp_path / "data"),
               "--port", str(port), *extra]  # fmt: skip
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.model
@pytest.mark.slow
def test_serve_pulls_an_hf_model_with_yes_and_answers(hub: FakeHub, tmp_path: Path) -> None:
    port = free_port()
    process = _serve(tmp_path, port, "--yes")
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=1) as client:
            deadline = time.monotonic() + 300
            while True:
                try:
                    client.hello()
                    break
                except NoReply:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(f"serve did not start: {process.communicate()[0]}") from None
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=300) as client:
            client.load_world(demo_world())
            client.register_npc(demo_npcs()[0])
            result = client.interact("guard", "Hello.")
        assert result.dialogue.strip()
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    assert f"downloading {FILE}: 100%" in output
    assert "is not in the catalogue; guessed from its GGUF metadata" in output
    assert [r[0] for r in hub.requests] == ["HEAD", "GET"]


def test_serve_without_yes_and_without_a_terminal_downloads_nothing(hub: FakeHub, tmp_path: Path) -> None:
    process = _serve(tmp_path, free_port())
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 2
    assert output.strip() == (
        f"loreguard: {REFERENCE} is not installed: run `loreguard models pull {REFERENCE}` first, or pass --yes to download it now"
    )
    assert hub.requests == []


def test_a_sidecar_downloading_for_a_game_stops_when_the_game_dies(hub: FakeHub, tmp_path: Path, model_bytes: bytes) -> None:
    """Launched by a game (--parent-pid, --log-file), the sidecar watches the game during the
    download too: the game dies mid-transfer, the sidecar exits instead of fetching gigabytes
    for nobody. The log has the download's progress a line per percent moved."""
    hub.stall_after = len(model_bytes) // 2
    game = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    log = tmp_path / "sidecar.log"
    sidecar = _serve(tmp_path, free_port(), "--yes", "--parent-pid", str(game.pid), "--log-file", str(log))
    try:
        assert hub.stalled.wait(60), f"the sidecar never started its download: {log.read_text() if log.exists() else ''}"
        wait_for(lambda: "downloading smol.gguf: " in log.read_text(), "a progress line in the sidecar's log")
        assert sidecar.poll() is None
        game.kill()
        game.communicate(timeout=60)
        wait_for(lambda: sidecar.poll() is not None, "the sidecar to exit after its game died")
    finally:
        game.kill()
        sidecar.kill()
        sidecar.communicate(timeout=60)
        game.communicate(timeout=60)
    assert sidecar.returncode == 0
    lines = [line for line in log.read_text().splitlines() if line.startswith(f"downloading {FILE}: ")]
    assert lines and all(re.fullmatch(rf"downloading {FILE}: \d+% \([0-9.]+/[0-9.]+ MiB\)", line) for line in lines), lines
    assert not (tmp_path / "data").exists()  # it never got to serve (a new folder is made once the model is loaded)
