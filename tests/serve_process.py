"""`loreguard serve` as a real process on the scripted model, for tests of the process itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from factories import say
from sidecar_helpers import GREETINGS

from loreguard.client import Client, NoReply


def serve_command(data: Path, port: int, script: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "loreguard.server.cli", "serve", "--backend", "scripted", "--script", str(script),
            "--data", str(data), "--port", str(port), *extra]  # fmt: skip


def start_serve(data: Path, port: int, script: Path, *extra: str) -> subprocess.Popen[str]:
    """A running `serve` that has answered `hello` (its output piped, stderr into stdout)."""
    process = subprocess.Popen(
        serve_command(data, port, script, *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=1) as client:
        deadline = time.monotonic() + 60
        while True:
            try:
                client.hello()
                return process
            except NoReply:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start: {process.communicate()[0]}") from None


def remembering_script(tmp_path: Path) -> Path:
    """Every answer proposes one episodic memory: each interaction writes two entries. The
    answers take turns (a short line said a third time to other questions is a loop)."""
    mutation = {"kind": "append_episodic", "text": "The traveller spoke with me.", "significance": 0.5}
    path = tmp_path / "script.json"
    path.write_text(json.dumps([say(line.replace("Well met", "Noted"), mutations=[mutation]) for line in GREETINGS]))
    return path
