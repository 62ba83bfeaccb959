"""A real sidecar on a loopback port, with the scripted model, for socket-level tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from factories import say
from stores import demo_store, open_store

from loreguard.server.inference import ScriptedBackend
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The default backend's replies, in turn: "Well met, traveller." first, and more of them than
#: an NPC's repeat window (24), since a short line said a third time to other questions is a loop.
GREETINGS = tuple(
    f"Well met, {who}."
    for who in (
        "traveller", "stranger", "friend", "wanderer", "pilgrim", "neighbour", "sailor", "rider", "scholar",
        "hunter", "minstrel", "farmer", "tinker", "weaver", "archer", "miller", "pedlar", "mason", "smith",
        "fisher", "herald", "cooper", "tanner", "carter", "potter", "baker", "brewer", "chandler",
    )
)  # fmt: skip


@contextmanager
def running_sidecar(
    data: Path, backend: ScriptedBackend | None = None, *, register: bool = True, **config: object
) -> Iterator[Sidecar]:
    store = demo_store(data / "memory.sqlite") if register else open_store(data / "memory.sqlite")
    sidecar = Sidecar(
        store, backend or ScriptedBackend([say(line) for line in GREETINGS], cycle=True), SidecarConfig(**{"port": 0, **config})
    )  # type: ignore[arg-type]
    sidecar.start()
    try:
        yield sidecar
    finally:
        sidecar.stop()
