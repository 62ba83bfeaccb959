"""The autoload's supervised sidecar (runtime/launcher.gd, supervisor.gd) in a real headless Godot
with a real `loreguard serve`: kill -9 mid-line, a SIGKILLed game, a foreign sidecar on the port."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from factories import say
from godot_helpers import DEMO_PROJECT, DEMO_SCENE_SCRIPT, godot_command, run_godot
from sidecar_helpers import free_port, running_sidecar
from waiting import wait_for

from loreguard.server.pipeline.inference import ScriptedBackend
from loreguard.server.sidecar.lifeline import is_alive

pytestmark = pytest.mark.slow

NOTED = {"kind": "append_episodic", "text": "The traveller spoke with me.", "significance": 0.5}


def _launch_env(tmp_path: Path, port: int, script: object, *extra: str) -> dict[str, str]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    loreguard = Path(sys.executable).with_name("loreguard")
    launch = " ".join(
        [str(loreguard), "serve", "--backend", "scripted", "--script", str(path), "--port", str(port),
         "--data", str(tmp_path / "data"), *extra]
    )  # fmt: skip
    return {"LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{port}", "LOREGUARD_AUTO_LAUNCH": "1", "LOREGUARD_LAUNCH_COMMAND": launch}


def test_kill_9_mid_line_fails_it_at_once_and_the_sidecar_comes_back_with_its_memory(tmp_path: Path) -> None:
    # Each line takes 1.5 s, like a model's, so the kill lands while Brom is answering; every
    # answer writes an episodic memory, the acknowledged writes the test checks after the restart.
    script = {"guard": [say("Evening, traveller.", mutations=[NOTED])], "merchant": [say("Welcome!")]}
    port = free_port()
    env = _launch_env(tmp_path, port, script, "--script-latency-ms", "1500")
    result = run_godot(["res://tests/supervision.tscn"], project=DEMO_PROJECT, timeout=200, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"supervision: \d+ passed, 0 failed", output), output
    assert "restarting" in output  # the status the player saw in between
    assert "[loreguard sidecar] loreguard sidecar listening on" in output  # its log, forwarded


def _run_until_ready(env: dict[str, str]) -> tuple[subprocess.Popen[str], int, str, list[str]]:
    """Start the demo until its sidecar is ready; the game, the sidecar's pid and address, and
    the output lines so far (a thread keeps reading the rest)."""
    game = subprocess.Popen(
        godot_command(["res://tests/wait_ready.tscn"], project=DEMO_PROJECT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert game.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(game.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    found: list[re.Match[str]] = []

    def ready() -> bool:
        found[:] = [m for line in list(lines) if (m := re.search(r"wait_ready: sidecar pid (\d+) at (\S+)", line))]
        return bool(found) or game.poll() is not None

    try:
        wait_for(ready, "the demo's sidecar to be ready", timeout_s=120)
    except AssertionError:
        game.kill()
        raise
    assert found, "".join(lines)
    return game, int(found[0].group(1)), found[0].group(2), lines


def test_a_sigkilled_game_leaves_no_sidecar_and_the_next_run_reuses_nothing_stale(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, **_launch_env(tmp_path, port, DEMO_SCENE_SCRIPT)}
    pids: list[int] = []
    for _ in range(3):  # `loreguard bench` is not needed: the claim is 0 orphans, each run checks it
        game, pid, address, lines = _run_until_ready(env)
        with game:
            game.send_signal(signal.SIGKILL)  # the editor's Stop button
            game.wait(timeout=60)
        wait_for(lambda pid=pid: not is_alive(pid), f"the sidecar (pid {pid}) to exit after its game was killed")
        output = "".join(lines)
        assert address == f"tcp://127.0.0.1:{port}", output  # the port was free again: nothing moved away
        assert "not started by this game" not in output, output
        pids.append(pid)
    assert len(set(pids)) == 3


def test_a_foreign_sidecar_on_the_port_is_left_alone(tmp_path: Path) -> None:
    """A sidecar this game did not launch (no launch token, e.g. one left over from an older
    addon) answers on the configured port: the game launches its own elsewhere and says so."""
    port = free_port()
    env = _launch_env(tmp_path, port, DEMO_SCENE_SCRIPT)
    (tmp_path / "foreign").mkdir()
    with running_sidecar(
        tmp_path / "foreign", ScriptedBackend(DEMO_SCENE_SCRIPT, cycle=True), register=False, port=port
    ) as foreign:
        result = run_godot(["res://tests/smoke.tscn"], project=DEMO_PROJECT, timeout=150, env=env)
        foreign_npcs = foreign.dispatcher.store.npc_ids()
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "demo smoke: 4 checks, 0 failed" in output, output
    assert "not started by this game" in output and f"answers on tcp://127.0.0.1:{port}" in output, output
    assert list(foreign_npcs) == []  # nothing was registered with the foreign sidecar


def test_reuse_running_uses_the_sidecar_already_on_the_port(tmp_path: Path) -> None:
    port = free_port()
    env = {**_launch_env(tmp_path, port, DEMO_SCENE_SCRIPT), "LOREGUARD_REUSE_RUNNING": "1"}
    (tmp_path / "mine").mkdir()
    with running_sidecar(tmp_path / "mine", ScriptedBackend(DEMO_SCENE_SCRIPT, cycle=True), register=False, port=port) as mine:
        result = run_godot(["res://tests/smoke.tscn"], project=DEMO_PROJECT, timeout=150, env=env)
        npcs = mine.dispatcher.store.npc_ids()
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "demo smoke: 4 checks, 0 failed" in output, output
    assert sorted(npcs) == ["guard", "merchant"]
    assert not (tmp_path / "data").exists()  # nothing was launched


def test_a_sidecar_that_cannot_start_ends_in_failed_with_its_reason(tmp_path: Path) -> None:
    port = free_port()
    loreguard = Path(sys.executable).with_name("loreguard")
    # `--backend scripted` without `--script` exits at once with a message.
    launch = f"{loreguard} serve --backend scripted --port {port} --data {tmp_path / 'data'}"
    env = {"LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{port}", "LOREGUARD_AUTO_LAUNCH": "1", "LOREGUARD_LAUNCH_COMMAND": launch}
    result = run_godot(["res://tests/launch_failure.tscn"], project=DEMO_PROJECT, timeout=200, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "launch_failure: restarting 1/5, restarting 2/5, restarting 3/5, restarting 4/5, restarting 5/5" in output, output
    assert re.search(r"launch_failure: failed: the sidecar exited \(its last log line: .*needs --script", output), output
    assert "launch_failure: a line after that: sidecar_down after" in output, output


def test_supervisor_lifeline_arguments_and_log_reading() -> None:
    result = run_godot(["-s", "res://tests/test_supervisor.gd"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output
