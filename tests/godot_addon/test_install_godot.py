"""godot_addon/install-godot.sh: the Godot it installs uses the Vulkan driver of its private root
(lavapipe), never the system's, and an existing install gets that launcher fix without a new
download."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from godot_helpers import ADDON_PROJECT, ROOT, rendering_godot, require_godot, xvfb_display

pytestmark = pytest.mark.slow

INSTALL = ROOT / "godot_addon" / "install-godot.sh"
ENV = ROOT / ".godot-env"


def _own_install() -> Path:
    """The script's own install, as the suite uses it (skips for a LOREGUARD_GODOT binary)."""
    binary = Path(require_godot())
    if binary != ENV / "godot":
        pytest.skip(f"Godot is {binary}, not install-godot.sh's")
    return binary


def _driver_files(launcher: Path) -> set[str]:
    found = re.findall(r'^export (VK_DRIVER_FILES|VK_ICD_FILENAMES)="([^"]+)"$', launcher.read_text(), flags=re.MULTILINE)
    assert {name for name, _ in found} == {"VK_DRIVER_FILES", "VK_ICD_FILENAMES"}, launcher.read_text()
    return {path for _, path in found}


def test_the_launcher_points_vulkan_at_the_private_lavapipe() -> None:
    launcher = _own_install()
    (icd,) = _driver_files(launcher)
    assert Path(icd).is_file() and Path(icd).is_relative_to(ENV / "root"), icd
    assert json.loads(Path(icd).read_text())["ICD"]["library_path"].endswith("libvulkan_lvp.so"), icd


def test_an_existing_install_gets_the_launcher_fix_without_a_download(tmp_path: Path) -> None:
    """An install from before the fix: its root (linked here, not copied) and the old launcher."""
    _own_install()
    dest = tmp_path / "godot-env"
    dest.mkdir()
    (dest / "root").symlink_to(ENV / "root")
    (dest / ".libraries-patched").touch()
    launcher = dest / "godot"
    launcher.write_text(f'#!/usr/bin/env bash\nexec "{dest / "root" / "usr" / "bin" / "godot"}" "$@"\n')
    launcher.chmod(0o755)
    result = subprocess.run(
        [str(INSTALL)], capture_output=True, text=True, timeout=300, env={**os.environ, "GODOT_ENV": str(dest)}
    )
    assert result.returncode == 0 and result.stdout.strip() == str(launcher), result.stdout + result.stderr
    assert sorted(p.name for p in dest.iterdir()) == [".libraries-patched", "godot", "root"]  # nothing downloaded
    (icd,) = _driver_files(launcher)
    assert icd == str(dest / "root" / "usr" / "share" / "vulkan" / "icd.d" / "lvp_icd.json"), icd
    version = subprocess.run([str(launcher), "--headless", "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("4."), version.stdout + version.stderr
    again = subprocess.run(
        [str(INSTALL)], capture_output=True, text=True, timeout=300, env={**os.environ, "GODOT_ENV": str(dest)}
    )
    assert again.returncode == 0 and _driver_files(launcher) == {icd}, again.stdout + again.stderr


def test_a_window_on_vulkan_runs_the_private_driver() -> None:
    """With a display, Vulkan reports the private lavapipe's version (from its ICD file), not
    the system driver's."""
    launcher = _own_install()
    binary = rendering_godot()
    (icd,) = _driver_files(launcher)
    api = json.loads(Path(icd).read_text())["ICD"]["api_version"]
    with xvfb_display(1280, 800) as display:
        result = subprocess.run(
            [binary, "--rendering-driver", "vulkan", "--rendering-method", "forward_plus", "--path", str(ADDON_PROJECT),
             "-s", "res://tests/check_run.gd", "--quit"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "DISPLAY": display},
        )  # fmt: skip
    output = result.stdout + result.stderr
    assert f"Vulkan {api} - Forward+ - Using Device" in output, output
