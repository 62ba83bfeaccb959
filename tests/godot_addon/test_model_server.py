"""The addon's status while the sidecar's model server is unreachable: a real sidecar on
loopback with the remote backend, a stand-in model server that fails its first requests, and a
headless Godot running godot_addon/tests/test_model_server.gd."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from godot_helpers import run_godot
from model_helpers import demo_store

from loreguard.server.bench.stand_in_engine import StandInConfig, StandInEngine
from loreguard.server.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

pytestmark = pytest.mark.slow


def test_the_status_says_the_model_server_is_unreachable_and_recovers(tmp_path: Path) -> None:
    # Three 503s: the first interaction's three tries fail and open the circuit; after its
    # cooldown (a millisecond, so nothing waits on time) one request goes through, and the
    # stand-in answers from then on.
    engine = StandInEngine(StandInConfig(slots=2, token_ms=1, fail_statuses=[503, 503, 503])).start()
    config = OpenAICompatibleConfig(base_url=engine.url, retry=3, circuit_threshold=3, circuit_cooldown_s=0.001)
    backend = OpenAICompatibleBackend(config)
    sidecar = Sidecar(demo_store(tmp_path / "memory.sqlite"), backend, SidecarConfig(port=0))
    sidecar.start()
    try:
        result = run_godot(
            ["-s", "res://tests/test_model_server.gd"], timeout=180, env={"LOREGUARD_TEST_SIDECAR": sidecar.address}
        )
    finally:
        sidecar.stop()
        backend.close()
        engine.stop()
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "SCRIPT ERROR" not in output, output
    assert re.search(r"^(\d+) passed, 0 failed$", output, re.MULTILINE), output
