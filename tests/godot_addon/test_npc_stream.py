"""Streamed replies in the Godot addon against a real sidecar on loopback: a headless Godot runs
demo_project/tests/stream_test.gd while this test runs the sidecar in a process of its own
(tests/paused_sidecar.py) and kills it (SIGKILL) when the scene asks, halfway through a stream."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from godot_helpers import DEMO_PROJECT, godot_command
from sidecar_helpers import free_port

pytestmark = pytest.mark.slow

HELPER = Path(__file__).resolve().parent.parent / "paused_sidecar.py"


def _wait_for(path: Path, process: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_chunks_arrive_in_order_per_request_and_a_killed_sidecar_ends_the_stream_with_an_error(tmp_path: Path) -> None:
    port = free_port()
    command = godot_command(["res://tests/stream.tscn"], project=DEMO_PROJECT)  # imports the project first
    sidecar = subprocess.Popen(
        [sys.executable, str(HELPER), str(port), str(tmp_path)],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert sidecar.stdout is not None
        assert sidecar.stdout.readline().startswith("serving"), "the sidecar did not start"
        env = dict(
            os.environ, LOREGUARD_ADDRESS=f"tcp://127.0.0.1:{port}", LOREGUARD_AUTO_LAUNCH="0", LOREGUARD_TEST_OUT=str(tmp_path)
        )
        godot = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        _wait_for(tmp_path / "kill-please", godot, timeout=120)
        assert (tmp_path / "kill-please").exists(), "the scene never got the first chunk of the story"
        sidecar.send_signal(signal.SIGKILL)
        sidecar.wait(30)
        output, _ = godot.communicate(timeout=150)
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
            sidecar.wait(30)
        if sidecar.stdout is not None:
            sidecar.stdout.close()
    assert godot.returncode == 0, output
    found = re.search(r"stream: (\d+) passed, 0 failed", output)
    assert found and int(found.group(1)) >= 14, output
