"""`loreguard serve --model hf:…` as a real process: pulled from the (fake) Hub, then served with
the real sidecar and the real model."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_hub import FILE, REFERENCE, FakeHub
from sidecar_helpers import free_port

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
