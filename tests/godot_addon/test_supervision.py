"""The autoload's supervised sidecar (sidecar/launcher.gd, supervisor.gd) in a real headless Godot
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
from godot_helpers import DEMO_PROJECT, DEMO_SCENE_SCRIPT, game_environment, godot_command, run_godot
from serve_process import remembering_script, start_serve
from sidecar_helpers import free_port, running_sidecar
from waiting import wait_for

from loreguard.server.inference import ScriptedBackend
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
        env=game_environment(DEMO_PROJECT, env),
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


def test_a_game_that_quits_shuts_its_sidecar_down_cleanly(tmp_path: Path) -> None:
    """A normal quit asks the sidecar to stop (its stop file), so it sends its replies and
    flushes memory: the log says so, and SQLite's WAL is gone (SIGKILL left it behind)."""
    port = free_port()
    env = {**os.environ, **_launch_env(tmp_path, port, DEMO_SCENE_SCRIPT), "LOREGUARD_TEST_QUIT": "1"}
    game, pid, _, lines = _run_until_ready(env)
    with game:
        assert game.wait(timeout=60) == 0
    assert not is_alive(pid), "the sidecar outlived its game's quit"
    output = "".join(lines)
    assert "[loreguard sidecar] the launching process" in output and "asked the sidecar to stop" in output, output
    assert "[loreguard sidecar] loreguard sidecar stopped: replies sent, memory flushed" in output, output
    assert "Ctrl-C" not in output, output  # no terminal advice in the game's output
    data = tmp_path / "data"
    assert (data / "memory.sqlite").exists()
    assert not (data / "memory.sqlite-wal").exists(), sorted(p.name for p in data.iterdir())


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


#: The fix every "cannot start" line names for a launch command (launcher.gd `_launch_fix`).
WHERE_LOREGUARD_IS = "<your Loreguard checkout>/.venv/bin/loreguard serve --port 7878` after ./dev"
BUNDLE_INSTEAD = "or set loreguard/sidecar/launch_mode to bundle"


def _launch_failure(tmp_path: Path, launch: str) -> tuple[str, dict[str, str]]:
    """The demo with `launch` as its launch command, until it failed: the output, and the
    `launch_failure: KEY: VALUE` lines demo_project/tests/launch_failure_test.gd printed."""
    port = free_port()
    env = {"LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{port}", "LOREGUARD_AUTO_LAUNCH": "1", "LOREGUARD_LAUNCH_COMMAND": launch}
    result = run_godot(["res://tests/launch_failure.tscn"], project=DEMO_PROJECT, timeout=200, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    found = dict(m.groups() for line in output.splitlines() if (m := re.match(r"launch_failure: ([^:]+): (.*)$", line)))
    return output, found


def _assert_one_line_no_restart(output: str, found: dict[str, str], launches: int) -> str:
    """Exactly one FAILED status, reported once as a problem and once in the error log, never a
    restart, and a line said afterwards fails at once; the FAILED reason."""
    assert found["restarts"] == "0" and found["launches"] == str(launches), output
    assert found["failed statuses"] == "1" and found["problems"] == "1", output
    assert found["problem is the status"] == "true" and found["sidecar running"] == "false", output
    assert output.count("ERROR: Loreguard: ") == 1, output  # push_error once, not once per restart
    assert "Could not create child process" not in output and "SCRIPT ERROR" not in output, output
    assert re.fullmatch(r"sidecar_down after \d+ ms", found["a line after that"]), output
    # The player reads one short line; the developer's reason is the Output panel's and the tooltip's.
    assert found["label"] == "The townsfolk cannot talk: the dialogue engine did not start (details in the Output panel).", output
    assert found["tooltip"] == found["failed"][:40], output
    assert "Brom could not answer: the dialogue engine is not running" in found["dialogue"], output
    # Brom and Mira's talk fails at once too, the toggle goes back, the dialogue says why.
    assert re.fullmatch(r"sidecar_down after \d+ ms", found["the scene"]), output
    assert found["the toggle after that"] == "false", output
    assert "Brom and Mira cannot talk: the dialogue engine is not running" in found["dialogue"], output
    # and the game quits without leaking (a scene waiting forever for a registration held on)
    assert "leaked at exit" not in output and "still in use at exit" not in output, output
    return found["failed"]


def test_a_launch_command_that_is_not_found_is_one_line_with_the_fix(tmp_path: Path) -> None:
    """The addon's default `loreguard serve` in a developer's own project, where no `loreguard` is
    on Godot's PATH (it exists only in the checkout's .venv after ./dev)."""
    launch = "loreguard-not-installed-here serve --port 7878"
    output, found = _launch_failure(tmp_path, launch)
    failed = _assert_one_line_no_restart(output, found, launches=0)
    assert failed.startswith(f"cannot start the sidecar `{launch}`: `loreguard-not-installed-here` is not on the PATH"), failed
    assert "environment variable LOREGUARD_LAUNCH_COMMAND" in failed and WHERE_LOREGUARD_IS in failed, failed
    assert BUNDLE_INSTEAD in failed and "`which loreguard`" in failed, failed


def test_a_launch_command_that_is_a_missing_path_or_not_executable_is_one_line_with_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "venv" / "bin" / "loreguard"
    output, found = _launch_failure(tmp_path, f"{missing} serve")
    failed = _assert_one_line_no_restart(output, found, launches=0)
    assert failed.startswith(f"cannot start the sidecar `{missing} serve`: {missing} does not exist. Fix: "), failed
    assert WHERE_LOREGUARD_IS in failed and BUNDLE_INSTEAD in failed, failed

    script = tmp_path / "loreguard"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    output, found = _launch_failure(tmp_path, f"{script} serve")
    failed = _assert_one_line_no_restart(output, found, launches=0)
    assert failed.startswith(
        f"cannot start the sidecar `{script} serve`: {script} is not executable (chmod +x {script}). Fix: "
    ), failed
    assert WHERE_LOREGUARD_IS in failed and BUNDLE_INSTEAD in failed, failed


def test_a_launch_command_that_exits_at_once_with_code_1_is_one_line_with_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "exits"
    script.write_text("#!/bin/sh\necho 'exits: unknown option' >&2\nexit 1\n")
    script.chmod(0o755)
    output, found = _launch_failure(tmp_path, f"{script} serve")
    failed = _assert_one_line_no_restart(output, found, launches=1)
    assert failed.startswith("the sidecar exited before it answered (exit code 1). Fix: "), failed
    assert (
        f"run `{script} serve` in a terminal to see why, then correct the environment variable LOREGUARD_LAUNCH_COMMAND" in failed
    )
    assert BUNDLE_INSTEAD in failed, failed


def test_a_sidecar_that_exits_before_it_answered_is_one_line_with_its_own_reason(tmp_path: Path) -> None:
    """A real `loreguard serve` with a bad argument: its own message is in the line."""
    loreguard = Path(sys.executable).with_name("loreguard")
    # `--backend scripted` without `--script` exits at once (code 1) with a message in its log.
    launch = f"{loreguard} serve --backend scripted --port 7878 --data {tmp_path / 'data'}"
    output, found = _launch_failure(tmp_path, launch)
    failed = _assert_one_line_no_restart(output, found, launches=1)
    assert re.match(r"the sidecar exited before it answered \(exit code 1; its last log line: .*needs --script", failed), failed
    assert f"run `{launch}` in a terminal to see why" in failed, failed


def test_supervisor_lifeline_arguments_and_log_reading() -> None:
    result = run_godot(["-s", "res://tests/test_supervisor.gd"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output


def test_a_save_another_copy_of_the_game_holds_is_said_as_such_not_as_a_failed_launch(tmp_path: Path) -> None:
    """A second copy of the game (or the editor's run beside an exported build) on the same save
    folder: its sidecar refuses at start (exit code 4), and the game says "another copy of the
    game is using this save" once, with the holder, never retrying."""
    data, script = tmp_path / "data", remembering_script(tmp_path)
    first = start_serve(data, free_port(), script)
    try:
        loreguard = Path(sys.executable).with_name("loreguard")
        output, found = _launch_failure(tmp_path, f"{loreguard} serve --backend scripted --script {script} --data {data}")
    finally:
        first.kill()
        first.communicate(timeout=60)
    assert found["restarts"] == "0" and found["failed statuses"] == "1" and found["problems"] == "1", output
    assert found["problem is the status"] == "true" and found["sidecar running"] == "false", output
    failed = found["failed"]
    assert failed.startswith(f"another copy of the game is using this save (its sidecar: process {first.pid}"), failed
    assert failed.endswith("close that copy, then start again"), failed
    assert found["label"] == (
        "The townsfolk cannot talk: another copy of the game is using this save. Close it, then start again."
    ), output
    assert re.fullmatch(r"sidecar_down after \d+ ms", found["a line after that"]), output
    assert "SCRIPT ERROR" not in output and "leaked at exit" not in output, output
