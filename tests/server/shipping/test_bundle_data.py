"""The frozen sidecar carries every data file the wheel does (pyproject's package-data)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from paths import ROOT

from loreguard.server.shipping.build_bundle import PACKAGE_DATA, PACKAGE_FILES


def test_every_package_data_pattern_is_in_the_bundle() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    folders = {(package, folder) for package, folder in PACKAGE_DATA}
    files = set(PACKAGE_FILES)
    for package, patterns in declared.items():
        for pattern in patterns:
            parts = Path(pattern).parts
            covered = (package, pattern) in files or (len(parts) > 1 and (package, parts[0]) in folders)
            assert covered, f"{package}: {pattern} is package data but the bundle does not carry it"
