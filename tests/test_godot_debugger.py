"""The Godot debugger tab: the game-side forwarder and the editor panel, in headless Godot
against a real sidecar and a package exported from the recorded demo session."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from godot_helpers import require_godot, run_godot
from sidecar_helpers import running_sidecar

from loreguard.server.audit.package import decode_package
from loreguard.server.cli import main
from loreguard.server.demo.run import run_demo

pytestmark = pytest.mark.slow


def test_forwarder_and_panel(tmp_path: Path) -> None:
    require_godot()
    assert run_demo(tmp_path / "demo", out=io.StringIO()) == 0
    package = tmp_path / "session.lgp"
    assert main(["audit", "export", "--data", str(tmp_path / "demo"), "--out", str(package)]) == 0
    tampered = tmp_path / "tampered.lgp"
    data = bytearray(package.read_bytes())
    data[-20] ^= 0x01
    tampered.write_bytes(bytes(data))
    (tmp_path / "live").mkdir()
    with running_sidecar(tmp_path / "live") as sidecar:
        result = run_godot(
            ["-s", "res://tests/test_debugger.gd"],
            timeout=120,
            env={
                "LOREGUARD_ADDRESS": sidecar.address,
                "LOREGUARD_TEST_OUT": str(tmp_path),
                "LOREGUARD_TEST_PACKAGE": str(package),
                "LOREGUARD_TEST_TAMPERED": str(tampered),
            },
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output, output
    # What the editor saved is a package the Python side verifies and replays.
    saved, _ = decode_package((tmp_path / "from-godot.json").read_bytes())
    assert [r.npc_id for r in saved.records] == ["guard", "merchant"]
    assert main(["replay", str(tmp_path / "from-godot.json")]) == 0
