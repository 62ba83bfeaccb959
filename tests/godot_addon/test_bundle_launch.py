"""How the addon finds a sidecar bundle (godot_addon/addons/loreguard/sidecar/sidecar_bundle.gd),
and the bad bundles a player could end up with: each is one status line, never a hang.

The bundles here are made up (a bundle.json and an executable); a real frozen bundle goes
through the same launch in tests/server/shipping/test_build_bundle.py."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from godot_helpers import ADDON_PROJECT, run_godot
from sidecar_helpers import free_port, running_sidecar

from loreguard.server.shipping.addon_zip import plugin_version
from loreguard.server.shipping.platform_tag import arch_name, os_name

pytestmark = pytest.mark.slow

VERSION = plugin_version(ADDON_PROJECT / "addons" / "loreguard")


def _fake_bundle(folder: Path, *, exit_code: int = 3, model: str | None = None, **manifest: object) -> Path:
    """A bundle whose executable exits at once (as a sidecar that cannot load its model does)."""
    folder.mkdir(parents=True)
    executable = folder / "loreguard-sidecar"
    executable.write_text(f"#!/bin/sh\necho 'loreguard-sidecar: cannot load the model' >&2\nexit {exit_code}\n")
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    body = {
        "format": 1,
        "loreguard": VERSION,
        "os": os_name(),
        "arch": arch_name(),
        "executable": "loreguard-sidecar",
        "model": model,
    }
    (folder / "bundle.json").write_text(json.dumps({**body, **manifest}))
    return folder


def _probe(bundle: Path, tmp_path: Path) -> str:
    env = {
        "LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{free_port()}", "LOREGUARD_AUTO_LAUNCH": "1",
        "LOREGUARD_LAUNCH_MODE": "bundle", "LOREGUARD_BUNDLE_PATH": str(bundle),
        "XDG_DATA_HOME": str(tmp_path / "user-data"),
    }  # fmt: skip
    result = run_godot(["-s", "res://tests/launch_probe.gd"], timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = [line for line in output.splitlines() if line.startswith("launch probe: ")]
    assert len(lines) == 1, output
    return lines[0]


def test_bundle_settings_launch_command_and_version_check() -> None:
    result = run_godot(["-s", "res://tests/test_bundle.gd"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output


def test_a_missing_bundle(tmp_path: Path) -> None:
    line = _probe(tmp_path / "nowhere", tmp_path)
    assert (
        line
        == f"launch probe: problem: no sidecar bundle at {tmp_path / 'nowhere'}: build it with `loreguard bundle` and put it beside the game (docs/shipping.md)"
    )


def test_a_bundle_for_another_platform(tmp_path: Path) -> None:
    line = _probe(_fake_bundle(tmp_path / "b", os="windows" if os_name() != "windows" else "linux"), tmp_path)
    assert "is built for" in line and f"this machine is {os_name()}-{arch_name()}" in line


def test_a_bundle_of_another_version(tmp_path: Path) -> None:
    line = _probe(_fake_bundle(tmp_path / "b", loreguard="0.0.1"), tmp_path)
    assert f"is Loreguard 0.0.1, the addon is {VERSION}: rebuild it with `loreguard bundle`" in line


def test_a_bundle_without_its_model_file(tmp_path: Path) -> None:
    line = _probe(_fake_bundle(tmp_path / "b", model="models/gone.gguf"), tmp_path)
    assert "is missing its model models/gone.gguf" in line


def test_a_bundle_whose_sidecar_exits_at_start(tmp_path: Path) -> None:
    line = _probe(_fake_bundle(tmp_path / "b"), tmp_path)
    assert line.startswith("launch probe: problem: the sidecar exited before it answered")


def test_unreadable_manifest(tmp_path: Path) -> None:
    bundle = _fake_bundle(tmp_path / "b")
    (bundle / "bundle.json").write_text("{not json")
    assert "is not readable JSON" in _probe(bundle, tmp_path)


def _probe_running(address: str) -> subprocess.CompletedProcess[str]:
    """The launch probe against a sidecar already running at `address` (reused, as configured)."""
    env = {
        "LOREGUARD_ADDRESS": address,
        "LOREGUARD_AUTO_LAUNCH": "1",
        "LOREGUARD_REUSE_RUNNING": "1",
        "LOREGUARD_LAUNCH_MODE": "command",
    }
    return run_godot(["-s", "res://tests/launch_probe.gd"], timeout=300, env=env)


def test_a_sidecar_of_another_version_is_one_status_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real sidecar that reports another Loreguard version in `hello` (any launch mode)."""
    monkeypatch.setattr("loreguard.server.sidecar.dispatch.version", lambda _name: "9.9.9")
    with running_sidecar(tmp_path) as sidecar:
        result = _probe_running(sidecar.address)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"the sidecar is loreguard 9.9.9 but the addon is loreguard {VERSION}: use the same version of both" in output, output


def test_the_matching_sidecar_is_ready_without_a_problem(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar:
        result = _probe_running(sidecar.address)
    output = result.stdout + result.stderr
    assert f"launch probe: ready loreguard {VERSION} problem=\n" in output + "\n" and result.returncode == 0, output
