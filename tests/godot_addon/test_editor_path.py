"""The editor path stays clean: opening the demo (or the addon's test project) in the Godot
editor, and the editor saving its settings, leave the tracked project.godot byte for byte as it
is, and the demo scene shows no node configuration warning in the Scene dock.

The editor is run headless on a copy of each project. A plain `--editor --quit` saves nothing,
so the copy also enables godot_addon/tests/editor_probe, a plugin that has the editor save the
project settings (as it does when a developer changes one, or a newer editor opens an older
project) without itself in the enabled plugins, and prints the Scene dock's warnings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from godot_helpers import ADDON_PROJECT, DEMO_PROJECT, require_godot

pytestmark = pytest.mark.slow

PROBE = ADDON_PROJECT / "tests" / "editor_probe"
PROBE_CFG = "res://addons/loreguard_editor_probe/plugin.cfg"


def _editor(project: Path, *args: str, scenes: str = "") -> str:
    env = {**os.environ, "LOREGUARD_AUTO_LAUNCH": "0", "LOREGUARD_PROBE_SCENES": scenes}
    result = subprocess.run(
        [require_godot(), "--headless", "--path", str(project), *args], capture_output=True, text=True, timeout=300, env=env
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def _copy(project: Path, to: Path) -> Path:
    """`project` as a fresh clone has it (no .godot; the demo's linked addon copied in), imported."""
    shutil.copytree(project, to, symlinks=False, ignore=shutil.ignore_patterns(".godot"))
    # Without its .uid: in a copy of godot_addon the probe would be there twice with one uid.
    shutil.copytree(PROBE, to / "addons" / "loreguard_editor_probe", ignore=shutil.ignore_patterns("*.uid"))
    _editor(to, "--import")
    return to


def _enable_probe(project: Path) -> None:
    """Adds the probe to the copy's enabled plugins (after the import, which would run it too)."""
    settings = project / "project.godot"
    text = settings.read_text()
    if "\nenabled=PackedStringArray(" in text:
        text = text.replace("\nenabled=PackedStringArray(", f'\nenabled=PackedStringArray("{PROBE_CFG}", ', 1)
    else:
        text += f'\n[editor_plugins]\n\nenabled=PackedStringArray("{PROBE_CFG}")\n'
    settings.write_text(text)


@pytest.mark.parametrize("project", [DEMO_PROJECT, ADDON_PROJECT], ids=["demo_project", "godot_addon"])
def test_the_editor_leaves_project_godot_byte_identical(project: Path, tmp_path: Path) -> None:
    shipped = (project / "project.godot").read_bytes()
    copy = _copy(project, tmp_path / project.name)
    assert (copy / "project.godot").read_bytes() == shipped, "the import rewrote project.godot"
    _editor(copy, "--editor", "--quit")
    assert (copy / "project.godot").read_bytes() == shipped, "opening the editor rewrote project.godot"
    _enable_probe(copy)
    output = _editor(copy, "--editor", "--quit-after", "3000")
    assert "editor probe: saved the project settings: OK" in output and "editor probe: done" in output, output
    written = (copy / "project.godot").read_bytes()
    assert written == shipped, f"the editor saves project.godot differently; ship what it writes:\n{written.decode()}"


def test_the_demo_scene_has_no_node_configuration_warnings(tmp_path: Path) -> None:
    copy = _copy(DEMO_PROJECT, tmp_path / "demo")
    _enable_probe(copy)
    output = _editor(copy, "--editor", "--quit-after", "3000", scenes="res://main.tscn")
    assert "editor probe: opened res://main.tscn (Main)" in output and "editor probe: done" in output, output
    warnings = [line for line in output.splitlines() if line.startswith("editor probe: warning ")]
    assert warnings == [], "\n".join(warnings)


def test_the_probe_sees_a_warning_the_editor_shows(tmp_path: Path) -> None:
    """The check above is only worth something if the probe reads warnings at all: a Label that
    wraps inside a container without a minimum width is one the editor warns about."""
    copy = _copy(DEMO_PROJECT, tmp_path / "demo")
    scene = copy / "main.tscn"
    text = scene.read_text()
    status = '[node name="Status" type="Label" parent="Margin/Columns/Panel"]'
    block = text[text.index(status) : text.index("\n[", text.index(status))]
    scene.write_text(text.replace(block, re.sub(r"\ncustom_minimum_size = [^\n]*", "", block)))
    _enable_probe(copy)
    output = _editor(copy, "--editor", "--quit-after", "3000", scenes="res://main.tscn")
    warnings = [line for line in output.splitlines() if line.startswith("editor probe: warning ")]
    assert len(warnings) == 1 and "Main/Margin/Columns/Panel/Status: " in warnings[0], output
    assert "autowrapping enabled must have a custom minimum size" in warnings[0], output


def test_a_fresh_clone_runs_without_script_errors_after_the_readme_import(tmp_path: Path) -> None:
    """Run before its first import, the demo prints a script error for every use of a class
    name (Godot's cache of them is in the .godot folder a clone lacks): the README's first
    Godot command is therefore the import, and after it the demo starts clean."""
    readme = (DEMO_PROJECT / "README.md").read_text()
    first = re.search(r"^.*\bgodot --.*$", readme, flags=re.MULTILINE)
    assert first is not None and "godot --headless --path demo_project --import" in first.group(0), first
    copy = _copy(DEMO_PROJECT, tmp_path / "demo")
    output = _editor(copy, "--quit-after", "30")
    errors = [line for line in output.splitlines() if re.search(r"SCRIPT ERROR|Parse Error", line)]
    assert errors == [], output
