"""`serve --parent-pid PID`: a sidecar launched by a game exits when that game process dies, or
when the game asks it to (`--stop-file`: the file appears).

The game cannot be relied on to stop its sidecar: the editor's Stop button and a crash end it
with SIGKILL, and a left-over sidecar keeps the port (and stale memory) for the next run. So the
sidecar watches its launcher itself, by polling; a process id the OS has since given to a new
process counts as dead too (its start time changed).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

#: How often the watch looks; the sidecar is gone within about this long after the game.
POLL_S = 0.25


def _linux_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None when there is no such file."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def start_time(pid: int) -> str | None:
    """An identity for the process `pid` as it is now (its start time, on Linux), else None."""
    fields = _linux_stat(pid)
    # Field 22 of stat (starttime) is the 20th after the command name.
    return fields[19] if fields is not None and len(fields) > 19 else None


def _windows_alive(pid: int) -> bool:
    import ctypes

    kernel = ctypes.windll.kernel32  # type: ignore[attr-defined]
    handle = kernel.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    try:
        code = ctypes.c_ulong()
        return bool(kernel.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259  # STILL_ACTIVE
    finally:
        kernel.CloseHandle(handle)


def is_alive(pid: int, identity: str | None = None) -> bool:
    """Whether `pid` runs (a zombie, killed but not yet reaped, does not), and is still the
    process whose `start_time` was `identity` when one is given."""
    if sys.platform == "win32":
        return _windows_alive(pid)  # (os.kill with signal 0 would terminate it there)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    fields = _linux_stat(pid)
    if fields is None:
        return True  # no /proc (macOS): the kill probe is all there is
    if fields[0] in ("Z", "X"):
        return False
    return identity is None or start_time(pid) == identity


class ParentWatch:
    """Calls `on_death` once, from its own thread, when process `pid` is no longer alive, or
    when `stop_file` exists: the launcher asks its sidecar to stop (a game that quits; Godot
    cannot send SIGTERM, and SIGKILL would leave the memory file's WAL behind). `asked` tells
    which it was."""

    def __init__(self, pid: int, on_death: Callable[[], None], poll_s: float = POLL_S, stop_file: Path | None = None) -> None:
        self.pid = pid
        self._identity = start_time(pid)
        self._on_death = on_death
        self._poll_s = poll_s
        self._stop_file = stop_file
        #: The launcher asked to stop (its stop file appeared) rather than died.
        self.asked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"parent-watch-{pid}", daemon=True)

    def start(self) -> ParentWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while is_alive(self.pid, self._identity):
            if self._stop_file is not None and self._stop_file.exists():
                self.asked = True
                break
            if self._stop.wait(self._poll_s):
                return
        if not self._stop.is_set():
            self._on_death()
