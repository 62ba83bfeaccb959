"""The Godot demo when its save cannot be written (demo_project/tests/storage_test.gd), against a
real sidecar whose writes fail on request: the player hears once that the game could not save,
never per line, and once that it can save again."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from godot_helpers import DEMO_PROJECT, DEMO_SCENE_SCRIPT, godot_command
from sidecar_helpers import free_port, running_sidecar
from waiting import wait_for

from loreguard.server.inference import ScriptedBackend

pytestmark = pytest.mark.slow


def _answer(request: Path, answer: Path, godot: subprocess.Popen[str], act: object) -> None:
    """When the scene touches `request`, do `act` and touch `answer` (the scene waits on it)."""
    wait_for(lambda: request.exists() or godot.poll() is not None, f"the scene to ask for {request.name}", timeout_s=120)
    assert request.exists(), f"the scene ended without asking for {request.name}"
    act()  # type: ignore[operator]
    answer.write_text("1")


def test_the_demo_says_once_that_it_could_not_save_and_once_that_it_can_again(tmp_path: Path) -> None:
    port = free_port()
    env = dict(
        os.environ, LOREGUARD_ADDRESS=f"tcp://127.0.0.1:{port}", LOREGUARD_AUTO_LAUNCH="0", LOREGUARD_TEST_OUT=str(tmp_path)
    )
    (tmp_path / "data").mkdir()
    with running_sidecar(tmp_path / "data", ScriptedBackend(DEMO_SCENE_SCRIPT, cycle=True), register=False, port=port) as sidecar:
        db = sidecar.store.db
        godot = subprocess.Popen(
            godot_command(["res://tests/storage.tscn"], project=DEMO_PROJECT), env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            # The write fails inside the interaction's transaction, as a failing disk's would.
            fail = "CREATE TEMP TRIGGER fail_audit BEFORE INSERT ON audit BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
            _answer(tmp_path / "fail-please", tmp_path / "failing", godot, lambda: db.execute(fail))
            _answer(tmp_path / "room-please", tmp_path / "room", godot, lambda: db.execute("DROP TRIGGER fail_audit"))
            output, _ = godot.communicate(timeout=150)
        finally:
            if godot.poll() is None:
                godot.kill()
                godot.communicate()
        interactions = sidecar.store.interactions("guard")
    assert godot.returncode == 0, output
    found = dict(m.groups() for line in output.splitlines() if (m := re.match(r"storage: ([^:]+): (.*)$", line)))
    assert found["before"] == "ok" and found["after"] == "ok", output
    assert found["failing 1"] == "storage_unavailable" and found["failing 2"] == "storage_unavailable", output
    assert found["storage_failing"] == "true" and found["storage_failing after"] == "false", output
    assert found["signals"] == "failed: the disk failed the write | recovered", output
    dialogue = found["dialogue"]
    assert dialogue.count("The game could not save what was said (the disk failed the write).") == 1, dialogue
    assert dialogue.count("The game can save what is said again.") == 1, dialogue
    assert "could not answer" not in dialogue and "SCRIPT ERROR" not in output, output
    assert interactions == 2  # the two refused lines left nothing behind
