"""Find (or install) the headless Godot and run GDScript test scripts in it."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ADDON_PROJECT = ROOT / "godot_addon"


@lru_cache(maxsize=1)
def godot_binary() -> str | None:
    """$LOREGUARD_GODOT, then .godot-env/godot (installing it), then `godot` on PATH."""
    if os.environ.get("LOREGUARD_GODOT"):
        return os.environ["LOREGUARD_GODOT"]
    local = ROOT / ".godot-env" / "godot"
    if not local.exists():
        installed = subprocess.run([str(ROOT / "godot_addon" / "install-godot.sh")], capture_output=True, text=True, timeout=900)
        if installed.returncode != 0:
            return shutil.which("godot")
    return str(local) if local.exists() else shutil.which("godot")


def require_godot() -> str:
    binary = godot_binary()
    if binary is None:
        pytest.skip("no Godot 4 binary: godot_addon/install-godot.sh could not install one here")
    return binary


def run_godot(args: list[str], *, project: Path = ADDON_PROJECT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run headless Godot on `project`; importing first so `class_name`s resolve."""
    binary = require_godot()
    _import(binary, str(project))
    return subprocess.run([binary, "--headless", "--path", str(project), *args], capture_output=True, text=True, timeout=timeout)


@lru_cache(maxsize=8)
def _import(binary: str, project: str) -> None:
    subprocess.run([binary, "--headless", "--path", project, "--import"], capture_output=True, text=True, timeout=300)
