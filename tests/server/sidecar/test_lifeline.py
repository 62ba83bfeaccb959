"""`serve --parent-pid`: the sidecar exits when the game that launched it dies, SIGKILL included;
`--launch-token` is echoed in `hello`; `--log-file` receives the output a game tails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import say
from sidecar_helpers import free_port
from waiting import wait_for

from loreguard.client import Client, NoReply
from loreguard.server.sidecar.lifeline import ParentWatch, is_alive

pytestmark = pytest.mark.slow


def _sleeper() -> subprocess.Popen[bytes]:
    """A stand-in for the game process: a child this test can SIGKILL and reap."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _serve(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([say("Well met.")]))
    command = [sys.executable, "-m", "loreguard.server.cli", "serve", "--backend", "scripted", "--script", str(script),
               "--data", str(tmp_path / "data"), "--port", str(port), *extra]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _hello(port: int, process: subprocess.Popen[str]):
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=1) as client:
        deadline = time.monotonic() + 60
        while True:
            try:
                return client.hello()
            except NoReply:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"serve did not start: {process.communicate()[0]}") from None


def test_is_alive_tells_running_from_killed_and_zombie_processes() -> None:
    assert is_alive(os.getpid())
    child = _sleeper()
    assert is_alive(child.pid)
    child.send_signal(signal.SIGKILL)
    wait_for(lambda: not is_alive(child.pid), "the killed (not yet reaped) child to count as dead")
    child.wait()
    assert not is_alive(child.pid)


def test_parent_watch_calls_back_once_the_process_dies() -> None:
    child = _sleeper()
    died: list[int] = []
    watch = ParentWatch(child.pid, lambda: died.append(child.pid), poll_s=0.02).start()
    child.kill()
    child.wait()
    wait_for(lambda: died, "the watch to notice the death")
    watch.stop()
    assert died == [child.pid]


def test_a_sidecar_exits_when_its_launcher_is_sigkilled(tmp_path: Path) -> None:
    game = _sleeper()
    port = free_port()
    log = tmp_path / "logs" / "sidecar.log"
    sidecar = _serve(tmp_path, port, "--parent-pid", str(game.pid), "--launch-token", "tok-123", "--log-file", str(log))
    with game, sidecar:
        hello = _hello(port, sidecar)
        assert hello.launch_token == "tok-123"
        game.kill()
        game.wait()
        sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0
    text = log.read_text()
    assert f"the launching process {game.pid} is gone; stopping" in text
    assert "loreguard sidecar stopped" in text


def test_parent_watch_calls_back_when_the_stop_file_appears(tmp_path: Path) -> None:
    child = _sleeper()
    asked: list[bool] = []
    stop_file = tmp_path / "sidecar.stop"
    watch = ParentWatch(child.pid, lambda: asked.append(True), poll_s=0.02, stop_file=stop_file).start()
    with child:
        stop_file.touch()
        wait_for(lambda: asked, "the watch to see the stop file")
        assert watch.asked and is_alive(child.pid)  # asked, not dead
        child.kill()


def test_a_sidecar_asked_to_stop_by_its_launcher_stops_cleanly(tmp_path: Path) -> None:
    game = _sleeper()
    port = free_port()
    log = tmp_path / "logs" / "sidecar.log"
    stop_file = tmp_path / "sidecar.stop"
    sidecar = _serve(tmp_path, port, "--parent-pid", str(game.pid), "--stop-file", str(stop_file), "--log-file", str(log))
    with game, sidecar:
        _hello(port, sidecar)
        stop_file.touch()
        sidecar.communicate(timeout=60)
        assert is_alive(game.pid)
        game.kill()
    assert sidecar.returncode == 0
    text = log.read_text()
    assert f"the launching process {game.pid} asked the sidecar to stop" in text
    assert "it stops with the game that launched it" in text and "Ctrl-C" not in text
    assert "loreguard sidecar stopped: replies sent, memory flushed" in text
    assert not (tmp_path / "data" / "memory.sqlite-wal").exists()


def test_a_sidecar_whose_launcher_is_already_gone_does_not_start(tmp_path: Path) -> None:
    game = _sleeper()
    game.kill()
    game.wait()
    sidecar = _serve(tmp_path, free_port(), "--parent-pid", str(game.pid))
    output, _ = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 1
    assert "is not running; not starting" in output


def test_hello_has_no_launch_token_unless_given(tmp_path: Path) -> None:
    port = free_port()
    sidecar = _serve(tmp_path, port)
    try:
        assert _hello(port, sidecar).launch_token is None
    finally:
        sidecar.terminate()
        sidecar.communicate(timeout=60)
