"""The sidecar keeps NPCs' evaluated prompts in DATA/prompt-cache across launches, with the real
embedded model: a relaunch's warm-up restores instead of evaluating; `loreguard cache list`
shows the files and `cache clear` empties the folder, refusing while a sidecar owns it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sidecar_helpers import free_port
from waiting import counter, wait_for

from loreguard.client import Client, NoReply
from loreguard.server.demo import demo_npcs, demo_world

pytestmark = [pytest.mark.model, pytest.mark.slow]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loreguard.server.cli", *args], capture_output=True, text=True, timeout=120)


def _launch_and_warm(data: Path, *, clear_while_running: bool = False) -> dict[str, int]:
    """One launch of `serve` on the embedded model: both demo NPCs warmed; the warm counters."""
    port = free_port()
    command = [sys.executable, "-m", "loreguard.server.cli", "serve", "--data", str(data), "--port", str(port)]
    log = data.parent / "serve.log"
    with log.open("a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=2) as client:

            def ready() -> bool:
                try:
                    client.hello()
                    return True
                except NoReply:
                    assert process.poll() is None, log.read_text()
                    return False

            wait_for(ready, "the sidecar's hello", timeout_s=120)
            client.load_world(demo_world())
            for profile in demo_npcs():
                client.register_npc(profile)
                client.warm(profile.id)
            wait_for(lambda: counter(client, "warm.warmed") == 2, "both warm-ups", timeout_s=300)
            if clear_while_running:
                refused = _cli("cache", "clear", "--data", str(data))
                assert refused.returncode == 4 and "in use" in refused.stderr + refused.stdout
            return {name: counter(client, name) for name in ("warm.tokens_evaluated", "warm.tokens_restored")}
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_a_relaunched_sidecar_restores_its_npcs_prompts_and_the_cache_is_listed_and_cleared(tmp_path: Path) -> None:
    data = tmp_path / "save"
    first = _launch_and_warm(data, clear_while_running=True)
    assert first["warm.tokens_evaluated"] > 1000 and first["warm.tokens_restored"] == 0
    listed = _cli("cache", "list", "--data", str(data))
    assert listed.returncode == 0
    assert "guard: " in listed.stdout and "merchant: " in listed.stdout and "(2 files" in listed.stdout
    second = _launch_and_warm(data)
    assert second["warm.tokens_evaluated"] == 0 and second["warm.tokens_restored"] >= first["warm.tokens_evaluated"]
    cleared = _cli("cache", "clear", "--data", str(data))
    assert cleared.returncode == 0 and "cleared: 2 files" in cleared.stdout
    assert "(0 files" in _cli("cache", "list", "--data", str(data)).stdout
