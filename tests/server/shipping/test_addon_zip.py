"""`loreguard addon-zip`: the addon alone, in the layout Godot's Asset Library installs."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from godot_helpers import ADDON_PROJECT
from paths import ROOT

from loreguard.server.shipping.addon_zip import AddonZipError, plugin_version, write_addon_zip

ADDON = ADDON_PROJECT / "addons" / "loreguard"


def test_the_zip_holds_the_addon_with_license_and_readme(tmp_path: Path) -> None:
    written = write_addon_zip(ADDON, ROOT / "LICENSE", tmp_path / "addon.zip")
    top = f"loreguard-{plugin_version(ADDON)}/addons/loreguard"
    names = zipfile.ZipFile(written.path).namelist()
    for required in (
        "plugin.cfg",
        "icon.svg",
        "LICENSE",
        "README.md",
        "plugin.gd",
        "client/client.gd",
        "sidecar/sidecar_bundle.gd",
    ):
        assert f"{top}/{required}" in names
    assert all(name.startswith(top + "/") for name in names)
    assert len(names) == written.files == len({p for p in ADDON.rglob("*") if p.is_file()}) + 2


def test_the_same_addon_zips_to_the_same_bytes(tmp_path: Path) -> None:
    first = write_addon_zip(ADDON, ROOT / "LICENSE", tmp_path / "a.zip").path.read_bytes()
    assert write_addon_zip(ADDON, ROOT / "LICENSE", tmp_path / "b.zip").path.read_bytes() == first


def test_a_folder_without_plugin_cfg_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AddonZipError, match="not an addon folder: no plugin.cfg, icon.svg"):
        write_addon_zip(tmp_path, ROOT / "LICENSE", tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()
