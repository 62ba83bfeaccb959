"""One owner per memory: a second `loreguard serve` on a data folder a running sidecar serves
refuses at start, in one line naming the folder and the process holding it; a crashed owner
leaves nothing to clear by hand."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from serve_process import remembering_script, serve_command, start_serve
from sidecar_helpers import free_port

from loreguard.client import Client
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.sidecar.serve import EXIT_FOLDER_IN_USE

pytestmark = pytest.mark.slow


def test_a_second_sidecar_on_the_same_data_folder_refuses_and_the_first_keeps_serving(tmp_path: Path) -> None:
    data, script, port = tmp_path / "save", remembering_script(tmp_path), free_port()
    first = start_serve(data, port, script)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=30) as client:
            client.load_world(demo_world())
            client.register_npc(demo_npcs()[0])
            said = client.interact("guard", "Hello.")
            started = time.monotonic()
            second = subprocess.run(serve_command(data, free_port(), script), capture_output=True, text=True, timeout=120)
            refused_in_s = time.monotonic() - started
            lines = (second.stdout + second.stderr).strip().splitlines()
            assert second.returncode == EXIT_FOLDER_IN_USE, lines
            assert len(lines) == 1, lines  # one line: no traceback, no model loading
            assert str(data) in lines[0] and f"process {first.pid}" in lines[0], lines
            assert "is in use by another Loreguard sidecar" in lines[0] and "--data" in lines[0], lines
            print(f"second sidecar refused in {refused_in_s:.2f} s")
            # The first never noticed: it serves, and its memory is its own.
            client.interact("guard", "Still there?")
            assert client.memory("guard").interactions == 2 and said.audit_record_id == "r1"
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
        # No stale lock after a crash: a new sidecar takes the folder with no manual step.
        port = free_port()
        again = start_serve(data, port, script)
        try:
            with Client(f"tcp://127.0.0.1:{port}", timeout_s=30) as client:
                assert client.memory("guard").interactions == 2
        finally:
            again.send_signal(signal.SIGTERM)
            again.communicate(timeout=60)
        assert again.returncode == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate(timeout=60)
