"""The demo scene in a rendering Godot (Xvfb + mesa llvmpipe, not --headless) at three window
sizes, against a scripted sidecar whose lines take a second like a model's and whose session is
governance-heavy (a refused attempt, fallbacks, an approved intent: GOVERNANCE_SCRIPT): the scene
tree is checked at each step, the governance view and then the editor's Loreguard tab included,
down to every label, tree cell and title fitting its width or wrapping in full
(demo_project/tests/screenshot_test.gd); the PNGs are kept in tests/artifacts/screenshots/<size>/
for a person (or CI's artifact upload) to look at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from godot_helpers import DEMO_PROJECT, GOVERNANCE_SCRIPT, ROOT, godot_command, rendering_godot, xvfb_display
from sidecar_helpers import running_sidecar

from loreguard.server.inference import ScriptedBackend

pytestmark = pytest.mark.slow

ARTIFACTS = ROOT / "tests" / "artifacts" / "screenshots"
SIZES = [(1280, 720), (1920, 1080), (800, 600)]


@pytest.fixture(scope="module")
def display() -> str:
    with xvfb_display() as value:
        yield value


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_demo_scene_renders_and_lays_out_at(width: int, height: int, display: str, tmp_path) -> None:
    binary = rendering_godot()
    out = ARTIFACTS / f"{width}x{height}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    backend = ScriptedBackend(GOVERNANCE_SCRIPT, cycle=True, latency_s=1.0)
    with running_sidecar(tmp_path, backend, register=False) as sidecar:
        env = {
            **os.environ,
            "DISPLAY": display,
            "LOREGUARD_ADDRESS": sidecar.address,
            "LOREGUARD_AUTO_LAUNCH": "0",
            "LOREGUARD_TEST_OUT": str(out),
        }
        command = godot_command(["res://tests/screenshot.tscn"], project=DEMO_PROJECT)
        command[0] = binary
        command.remove("--headless")
        command[1:1] = ["--rendering-driver", "opengl3", "--audio-driver", "Dummy", "--resolution", f"{width}x{height}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert "llvmpipe" in output or "OpenGL" in output, output  # it rendered, not headless
    assert f"screenshots: window {width}x{height}" in output, output
    assert result.returncode == 0 and re.search(r"screenshots: \d+ passed, 0 failed", output), output
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(
        ["ready.png", "governance-unfolded.png", "editor-tab.png", "editor-tab-first.png", "scene-at-gate.png", "walked-away.png"]
        + [
            f"{moment}-{name}.png"
            for name in ("refused-then-passed", "fallback", "intent", "every-attempt-refused", "no-sale")
            for moment in ("thinking", "answered")
        ]
    ), pngs
    assert all((out / name).stat().st_size > 2000 for name in pngs)  # real images, not empty frames
