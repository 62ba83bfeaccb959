"""LoreguardTypewriter (godot_addon/addons/loreguard/nodes/typewriter.gd) in Godot: a line never
waits on it more than half a second after it arrived, a click or key skips, and a speed of 0
or less set from a script shows text at once (godot_addon/tests/test_typewriter.gd)."""

from __future__ import annotations

import pytest
from godot_helpers import run_godot

pytestmark = pytest.mark.slow


def test_typewriter_lag_skip_and_zero_speed() -> None:
    result = run_godot(["-s", "res://tests/test_typewriter.gd"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output
