"""The platform a bundle is built for, named the way Godot names the player's machine.

The addon compares these with `OS.get_name()` and `Engine.get_architecture_name()` before it
launches a bundle, so a Linux bundle beside a Windows export is one clear status line.
"""

from __future__ import annotations

import platform
import sys

_OS_NAMES = {"linux": "linux", "win32": "windows", "darwin": "macos"}
_ARCH_NAMES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def os_name() -> str:
    return _OS_NAMES.get(sys.platform, sys.platform)


def arch_name() -> str:
    machine = platform.machine().lower()
    return _ARCH_NAMES.get(machine, machine)


def executable_name(stem: str) -> str:
    return stem + (".exe" if sys.platform == "win32" else "")
