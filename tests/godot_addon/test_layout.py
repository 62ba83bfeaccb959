"""The Godot addon's shape, read from its files (no Godot needed): what a game ships (wire/,
sidecar/, client/, display/, nodes/, resources/) never reaches into the editor-only debugger/, and nothing in the addon names
the folder it is installed in; every exported field and signal has a `##` doc line for the
inspector; every class a designer can create has an icon; every class name starts with
Loreguard; every script keeps its Godot 4.4+ `.uid` file beside it (its size caps are
tests/test_architecture.py's). Each failure names the file and line."""

from __future__ import annotations

import re
from pathlib import Path

from godot_helpers import ADDON_PROJECT, DEMO_PROJECT, ROOT

ADDON = ADDON_PROJECT / "addons" / "loreguard"
#: What an exported game loads. The debugger's game-side forwarder is client/debug_forwarder.gd.
SHIPPED = ("wire", "sidecar", "client", "display", "nodes", "resources")
#: Classes that never show in the Create New Node / New Resource dialogs, so need no icon.
NO_ICON_BASES = {"RefCounted", "Object"}

CLASS_NAME = re.compile(r"^class_name\s+(\w+)", re.MULTILINE)
EXTENDS = re.compile(r"^extends\s+(\S+)", re.MULTILINE)
ICON = re.compile(r'^@icon\("([^"]+)"\)', re.MULTILINE)
# @export_group and friends only label inspector sections; the fields after them carry the docs.
EXPORT = re.compile(r"^@export(?!_group|_subgroup|_category)\b")
SIGNAL = re.compile(r"^signal\s")


def _scripts(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.gd"))


def _where(path: Path, number: int, line: str) -> str:
    return f"{path.relative_to(ROOT)}:{number}: {line.strip()}"


def test_the_addon_is_grouped_by_kind() -> None:
    folders = {p.name for p in ADDON.iterdir() if p.is_dir()}
    assert folders == {*SHIPPED, "debugger"}, folders
    assert [p.name for p in ADDON.glob("*.gd")] == ["plugin.gd"]


def test_shipped_code_never_refers_to_the_debugger_or_the_install_path() -> None:
    editor_classes = sorted({name for path in _scripts(ADDON / "debugger") for name in CLASS_NAME.findall(path.read_text())})
    forbidden = re.compile("|".join([r"debugger/", r"res://addons/loreguard", *(rf"\b{name}\b" for name in editor_classes)]))
    problems = [
        _where(path, number, line)
        for folder in SHIPPED
        for path in _scripts(ADDON / folder)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if forbidden.search(line)
    ]
    assert not problems, "what a game ships must not depend on debugger/:\n" + "\n".join(problems)


def test_the_addon_finds_its_own_files_by_relative_paths() -> None:
    problems = [
        _where(path, number, line)
        for path in _scripts(ADDON)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "res://addons/loreguard" in line
    ]
    assert not problems, "use ./ or ../ paths so the addon works wherever it is installed:\n" + "\n".join(problems)


def test_every_exported_field_and_signal_has_a_doc_line() -> None:
    problems = []
    for path in _scripts(ADDON):
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            stripped = line.strip()
            if EXPORT.match(stripped) or SIGNAL.match(stripped):
                if index == 0 or not lines[index - 1].strip().startswith("##"):
                    problems.append(_where(path, index + 1, line))
    assert not problems, "a `##` line directly above each, for the inspector:\n" + "\n".join(problems)


def test_every_resource_and_node_class_has_an_icon() -> None:
    problems = []
    for path in _scripts(ADDON):
        source = path.read_text()
        base = EXTENDS.search(source)
        if not CLASS_NAME.search(source) or (base is not None and base.group(1) in NO_ICON_BASES):
            continue
        icon = ICON.search(source)
        if icon is None:
            problems.append(f"{path.relative_to(ROOT)}: no @icon")
        elif not (path.parent / icon.group(1)).resolve().is_file():
            problems.append(f"{path.relative_to(ROOT)}: @icon names a missing file {icon.group(1)}")
    assert not problems, "\n".join(problems)


def test_every_class_name_starts_with_loreguard() -> None:
    names = {path.relative_to(ROOT): CLASS_NAME.findall(path.read_text()) for path in _scripts(ADDON)}
    wrong = {str(path): found for path, found in names.items() if any(not n.startswith("Loreguard") for n in found)}
    assert not wrong, wrong


def test_every_script_keeps_its_uid_file_beside_it() -> None:
    # The demo's addons/loreguard is a link to the addon, which is checked once, as itself.
    linked = DEMO_PROJECT / "addons"
    files = [
        p for p in [*ADDON_PROJECT.rglob("*"), *DEMO_PROJECT.rglob("*")] if ".godot" not in p.parts and linked not in p.parents
    ]
    missing = sorted(str(p.relative_to(ROOT)) for p in files if p.suffix == ".gd" and not p.with_suffix(".gd.uid").exists())
    orphans = sorted(str(p.relative_to(ROOT)) for p in files if p.name.endswith(".gd.uid") and not p.with_suffix("").exists())
    assert not missing and not orphans, f"scripts without a .uid: {missing}; .uid files without a script: {orphans}"


def test_the_demo_project_stays_loadable_by_the_oldest_supported_godot() -> None:
    """The demo's project.godot is stored as Godot 4.6 writes it, so the editor leaves it alone
    (test_editor_path.py), in the format Godot 4.3, the documented minimum, reads too: config
    version 5 and no setting 4.3 does not know. A 4.3 Project Manager warns that the project
    was last edited in 4.6 and opens it when asked (rewriting the tag to 4.3); `godot --path`
    does not look at the tag. The renderer is pinned to Compatibility, so F5 never uses Forward+."""
    project = (DEMO_PROJECT / "project.godot").read_text()
    assert "\nconfig_version=5\n" in project
    assert 'config/features=PackedStringArray("4.6", "GL Compatibility")' in project
    assert 'renderer/rendering_method="gl_compatibility"' in project
    assert 'renderer/rendering_method.mobile="gl_compatibility"' in project
    section, keys = "", set()
    for line in project.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith(";") and section:
            keys.add(f"{section}/{line.split('=', 1)[0]}")
    known_to_4_3 = {
        "application/config/name", "application/run/main_scene", "application/config/features",
        "autoload/Loreguard", "display/window/size/viewport_width", "display/window/size/viewport_height",
        "editor_plugins/enabled", "rendering/renderer/rendering_method", "rendering/renderer/rendering_method.mobile",
    }  # fmt: skip
    assert {k for k in keys if not k.startswith("loreguard/")} <= known_to_4_3, keys
