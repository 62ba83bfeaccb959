"""One version everywhere a user can see it: pyproject.toml, the addon's plugin.cfg, the addon's
own constant (an exported game has no plugin.cfg) and the sidecar's `hello` reply."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from godot_helpers import ADDON_PROJECT
from paths import ROOT
from sidecar_helpers import running_sidecar

from loreguard.client import Client
from loreguard.server.shipping.addon_zip import plugin_version

ADDON = ADDON_PROJECT / "addons" / "loreguard"


def test_pyproject_plugin_cfg_addon_constant_and_hello_agree(tmp_path: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    constant = re.search(r'const ADDON_VERSION := "([^"]+)"', (ADDON / "sidecar" / "sidecar_bundle.gd").read_text())
    assert constant is not None
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=30) as client:
        hello = client.hello()
    assert {plugin_version(ADDON), constant.group(1), hello.server.removeprefix("loreguard ")} == {project}
