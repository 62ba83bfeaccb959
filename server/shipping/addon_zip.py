"""`loreguard addon-zip`: the Godot addon alone, in the Asset Library layout.

    loreguard-<version>/addons/loreguard/plugin.cfg, icon.svg, LICENSE, README.md, client/, wire/, ...

Godot's asset installer drops the zip's top folder and copies `addons/` into the project, so a
user gets `res://addons/loreguard/` with the license and readme inside it. Entries are written
in sorted order with a fixed timestamp, so the same addon always zips to the same bytes.
"""

from __future__ import annotations

import configparser
import zipfile
from dataclasses import dataclass
from pathlib import Path

#: Files the Asset Library layout needs inside addons/loreguard/.
REQUIRED = ("plugin.cfg", "icon.svg")
#: 1980-01-01, the earliest time a zip entry can hold: no build-time clock in the archive.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class AddonZipError(Exception):
    """The addon folder is missing something the Asset Library layout needs."""


@dataclass(frozen=True)
class AddonZip:
    path: Path
    files: int
    size_bytes: int


def plugin_version(addon: Path) -> str:
    """plugin.cfg's `version`."""
    config = configparser.ConfigParser()
    config.read(addon / "plugin.cfg", encoding="utf-8")
    return config.get("plugin", "version", fallback="").strip('"')


def write_addon_zip(addon: Path, license_file: Path, out: Path) -> AddonZip:
    """Zip `addon` (a folder holding plugin.cfg) with `license_file` and the addon's README.md."""
    missing = [name for name in REQUIRED if not (addon / name).is_file()]
    if missing:
        raise AddonZipError(f"{addon} is not an addon folder: no {', '.join(missing)}")
    if not license_file.is_file():
        raise AddonZipError(f"no license file at {license_file}")
    readme = addon / "README.md"
    if not readme.is_file():
        readme = addon.parent.parent / "README.md"  # godot_addon/README.md documents the addon
    if not readme.is_file():
        raise AddonZipError(f"no README.md in {addon} or {addon.parent.parent}")
    top = f"loreguard-{plugin_version(addon)}/addons/{addon.name}"
    entries = {f"{top}/{p.relative_to(addon).as_posix()}": p for p in addon.rglob("*") if p.is_file()}
    entries.setdefault(f"{top}/LICENSE", license_file)
    entries.setdefault(f"{top}/README.md", readme)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[name].read_bytes())
    return AddonZip(out, len(entries), out.stat().st_size)
