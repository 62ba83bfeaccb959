"""`loreguard serve`: load the model (with a progress line), bind, serve until SIGINT/SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from loreguard.memory import MemoryStore
from loreguard.server.pipeline.inference.base import InferenceBackend
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


def load_with_progress(what: str, load: Callable[[], InferenceBackend], out: TextIO) -> InferenceBackend:
    """Run `load()` while a line on `out` counts the seconds."""
    done = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not done.wait(0.25):
            print(f"\rloading {what} ... {time.monotonic() - started:4.1f} s", end="", file=out, flush=True)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        return load()
    finally:
        done.set()
        ticker.join()
        print(f"\rloaded {what} in {time.monotonic() - started:.1f} s      ", file=out, flush=True)


def serve(
    backend_factory: Callable[[], InferenceBackend], what: str, data: Path, config: SidecarConfig, out: TextIO = sys.stderr
) -> int:
    data.mkdir(parents=True, exist_ok=True)
    backend = load_with_progress(what, backend_factory, out)
    sidecar = Sidecar(MemoryStore(data / "memory.sqlite"), backend, config)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sidecar.request_stop())
    print(f"loreguard sidecar listening on {sidecar.address} (data in {data}); Ctrl-C stops it", file=out, flush=True)
    try:
        sidecar.serve_forever()
    finally:
        backend.close()
    print("loreguard sidecar stopped: replies sent, memory flushed", file=out, flush=True)
    return 0
