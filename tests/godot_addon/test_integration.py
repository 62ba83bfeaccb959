"""The Godot addon against a real sidecar on loopback: a headless Godot runs the demo
project's integration scene (demo_project/tests/integration_test.gd) while this test plays the
sidecar's operator, including a restart halfway through."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from factories import say
from godot_helpers import DEMO_DATA, DEMO_PROJECT, godot_command, run_godot
from sidecar_helpers import free_port, running_sidecar

from loreguard.schemas import NpcProfile, WorldDefinition
from loreguard.server.inference import ScriptedBackend

pytestmark = pytest.mark.slow

LANTERN = {"kind": "emit_world_intent", "intent": "give_item", "params": {"item": "lantern", "count": 1}}


def _backend() -> ScriptedBackend:
    script = {
        "guard": [say("The gate closes at dusk, traveller."), say("Nothing I can speak of, traveller.")],
        "merchant": [say("One lantern, freshly oiled!", "happy", [LANTERN]), say("Welcome back, dear!", "happy")],
    }
    return ScriptedBackend(script, cycle=True)


def _wait_for(path: Path, process: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            return
        time.sleep(0.05)


@dataclass(frozen=True)
class Session:
    returncode: int
    output: str
    out_dir: Path


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """One run of the integration scene, with the sidecar restarted when the scene asks."""
    out_dir = tmp_path_factory.mktemp("godot-integration")
    port = free_port()
    env = dict(
        os.environ, LOREGUARD_ADDRESS=f"tcp://127.0.0.1:{port}", LOREGUARD_AUTO_LAUNCH="0", LOREGUARD_TEST_OUT=str(out_dir)
    )
    command = godot_command(["res://tests/integration.tscn"], project=DEMO_PROJECT)
    (out_dir / "first").mkdir()
    (out_dir / "second").mkdir()
    with running_sidecar(out_dir / "first", _backend(), register=False, port=port):
        godot = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        _wait_for(out_dir / "restart-please", godot, timeout=120)
    # An empty sidecar on the same port: the NPCs only exist there if the client re-registers.
    with running_sidecar(out_dir / "second", _backend(), register=False, port=port):
        output, _ = godot.communicate(timeout=150)
    return Session(godot.returncode, output, out_dir)


def test_addon_registers_talks_gets_errors_and_survives_a_restart(session: Session) -> None:
    assert session.returncode == 0, session.output
    assert re.search(r"integration: (\d+) passed, 0 failed", session.output), session.output
    assert int(re.search(r"(\d+) passed", session.output).group(1)) >= 15, session.output


def test_the_demo_resources_are_the_terminal_demos_json(session: Session) -> None:
    """The .tres files are imported from server/demo/data; what the addon sends from them must
    be exactly that JSON, as the sidecar's schemas read it."""
    bodies = json.loads((session.out_dir / "bodies.json").read_text())
    world = json.loads((DEMO_DATA / "world.json").read_text())
    assert WorldDefinition.model_validate(bodies["world"]) == WorldDefinition.model_validate(world)
    assert sorted(bodies["npcs"]) == ["guard", "merchant"]
    for npc_id, body in bodies["npcs"].items():
        source = json.loads((DEMO_DATA / "npcs" / f"{npc_id}.json").read_text())
        assert NpcProfile.model_validate(body) == NpcProfile.model_validate(source)


@pytest.mark.model
def test_demo_npcs_answer_through_the_addon_with_the_real_model(tmp_path: Path, llama_backend) -> None:
    """The whole chain with nothing scripted: .tres resources → addon → sidecar → llama.cpp →
    governance → `replied` signal."""
    with running_sidecar(tmp_path, llama_backend, register=False, request_timeout_ms=300_000) as sidecar:
        env = {"LOREGUARD_ADDRESS": sidecar.address, "LOREGUARD_AUTO_LAUNCH": "0"}
        result = run_godot(["res://tests/talk.tscn"], project=DEMO_PROJECT, timeout=660, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "talk: 2 of 2 answered" in output, output
