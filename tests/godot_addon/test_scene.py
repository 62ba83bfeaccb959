"""A LoreguardScene in a headless Godot against a real sidecar on loopback (scripted model):
demo_project/tests/scene_test.gd checks the lines, the signals, memory, the player joining and
walking away."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from factories import say
from godot_helpers import DEMO_PROJECT, run_godot
from sidecar_helpers import running_sidecar

from loreguard.server.inference import ScriptedBackend

pytestmark = pytest.mark.slow


def test_a_scene_node_runs_a_conversation_the_player_joins_and_leaves(tmp_path: Path) -> None:
    script = {
        "guard": [say("Mira, is the smith back?"), say("Then we wait.")],
        "merchant": [say("Not yet, Brom."), say("Rope, yes! Two silver.")],
    }
    with running_sidecar(tmp_path, ScriptedBackend(script)) as sidecar:
        env = dict(os.environ, LOREGUARD_ADDRESS=sidecar.address, LOREGUARD_AUTO_LAUNCH="0")
        done = run_godot(["res://tests/scene.tscn"], project=DEMO_PROJECT, timeout=180, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    found = re.search(r"scene: (\d+) passed, 0 failed", output)
    assert found and int(found.group(1)) >= 12, output


def test_walking_away_mid_line_stops_the_thinking_and_the_line_and_nobody_remembers_it(tmp_path: Path) -> None:
    # each scripted line takes 1.5 s, as a model's would: the player leaves while Brom thinks
    script = {
        "guard": [say("The smith is late again."), say("Aye, still here."), say("Off with you, then."), say("Farewell.")],
        "merchant": [say("Not yet, Brom.")],
    }
    with running_sidecar(tmp_path, ScriptedBackend(script, latency_s=1.5)) as sidecar:
        env = dict(os.environ, LOREGUARD_ADDRESS=sidecar.address, LOREGUARD_AUTO_LAUNCH="0")
        done = run_godot(["res://tests/scene_leave.tscn"], project=DEMO_PROJECT, timeout=180, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"scene_leave: 16 passed, 0 failed", output), output
