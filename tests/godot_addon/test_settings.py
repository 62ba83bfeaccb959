"""The addon's project settings: the launch command the autoload runs, in a real Godot."""

from __future__ import annotations

import pytest
from godot_helpers import run_godot


@pytest.mark.slow
def test_the_launch_command_carries_the_judge_setting() -> None:
    result = run_godot(["-s", "res://tests/test_settings.gd"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output
