"""Run a frozen bundle the way a player's machine would: no PATH, no PYTHONPATH, no venv, and
(where user namespaces allow it) the checkout and every Python install hidden behind empty mounts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from paths import ROOT

import loreguard.server
from loreguard.client import Client, NoReply
from loreguard.schemas.wire import HelloReply


def build_machine_paths() -> list[Path]:
    """Where this machine's Python and Loreguard live: nothing in a bundle may reach them."""
    paths = {ROOT, Path(sys.prefix), Path(sys.base_prefix), Path(loreguard.server.__path__[0]).resolve().parent}
    # Whatever else this interpreter imports from (PYTHONPATH folders, site-packages).
    paths |= {Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != Path("/")}
    resolved = sorted({p.resolve() for p in paths})
    # Hiding a folder hides what is inside it; mounting inside a hidden folder would fail.
    return [p for p in resolved if not any(p != q and p.is_relative_to(q) for q in resolved)]


def can_hide_paths() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


def isolated(command: list[str], hide: list[Path]) -> list[str]:
    """`command` in a mount namespace where every folder in `hide` is an empty tmpfs, when possible."""
    if not can_hide_paths():
        return command
    mount = shutil.which("mount")
    mounts = " && ".join(f"{mount} -t tmpfs none '{p}'" for p in hide)
    return [shutil.which("unshare") or "unshare", "-rm", "/bin/sh", "-c", f'{mounts} && exec "$@"', "sh", *command]


def bare_environment(home: Path) -> dict[str, str]:
    """What a player's desktop passes a game's child process, minus anything Python or PATH."""
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "LANG": "C.UTF-8"}


def wait_until_ready(process: subprocess.Popen[str], port: int, timeout_s: float = 180) -> HelloReply:
    """The first `hello` reply of the sidecar `process` serves on `port`."""
    deadline = time.monotonic() + timeout_s
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=0.5) as client:
        while True:
            try:
                return client.hello()
            except NoReply:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    output = process.communicate()[0]
                    raise RuntimeError(
                        f"the sidecar did not become ready (exit {process.returncode}): {output[-3000:]}"
                    ) from None


def mapped_files(pid: int) -> set[str]:
    """Every file the process `pid` has mapped (its executable, shared libraries, the model)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {
        line.split(maxsplit=5)[5]
        for line in maps.splitlines()
        if len(line.split(maxsplit=5)) == 6 and line.split(maxsplit=5)[5].startswith("/")
    }
