"""mypy over the whole package: strict on schemas/, memory/ and client/, checked elsewhere."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The import names and the folders they live in, read from pyproject's package-dir.
PACKAGES = {
    name.removeprefix("loreguard."): folder
    for name, folder in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-dir"
    ].items()
}


@pytest.mark.slow
def test_mypy_finds_no_type_errors(tmp_path: Path) -> None:
    # The editable install maps `loreguard.*` with an import hook mypy cannot follow; a tree of
    # links gives it the same names.
    package = tmp_path / "loreguard"
    package.mkdir()
    for name, folder in PACKAGES.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         "-p", "loreguard"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
