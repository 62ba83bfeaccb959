"""The GDScript DEALER (LoreguardDealer) against real libzmq ROUTER sockets on loopback."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import zmq
from godot_helpers import run_godot

pytestmark = pytest.mark.slow


@contextmanager
def echo_router(**options: int) -> Iterator[str]:
    """A ROUTER that echoes every message; "multi" gets a three-part answer."""
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    for option, value in options.items():
        router.setsockopt(getattr(zmq, option), value)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def serve() -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        while not stop.is_set():
            if not poller.poll(50):
                continue
            identity, *parts = router.recv_multipart()
            reply = [b"one", b"two", b"three"] if parts == [b"multi"] else parts
            router.send_multipart([identity, *reply])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(timeout=5)
        router.close(linger=0)


def test_dealer_against_libzmq_router() -> None:
    with echo_router() as plain, echo_router(HEARTBEAT_IVL=100, HEARTBEAT_TIMEOUT=300) as heartbeat:
        env = {"LOREGUARD_TEST_ROUTER": plain, "LOREGUARD_TEST_ROUTER_HEARTBEAT": heartbeat}
        result = run_godot(["-s", "res://tests/test_dealer.gd"], timeout=120, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"^(\d+) passed, 0 failed$", output, re.MULTILINE), output
    assert int(re.search(r"^(\d+) passed", output, re.MULTILINE).group(1)) >= 20, output
