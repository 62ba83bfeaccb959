"""A real sidecar on a loopback port, with the scripted model, for socket-level tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from factories import say
from stores import demo_store, open_store

from loreguard.server.pipeline.inference import ScriptedBackend
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_sidecar(
    data: Path, backend: ScriptedBackend | None = None, *, register: bool = True, **config: object
) -> Iterator[Sidecar]:
    store = demo_store(data / "memory.sqlite") if register else open_store(data / "memory.sqlite")
    sidecar = Sidecar(
        store, backend or ScriptedBackend([say("Well met, traveller.")], cycle=True), SidecarConfig(**{"port": 0, **config})
    )  # type: ignore[arg-type]
    sidecar.start()
    try:
        yield sidecar
    finally:
        sidecar.stop()
