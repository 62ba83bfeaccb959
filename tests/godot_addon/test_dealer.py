"""The GDScript DEALER (LoreguardDealer) and client (LoreguardClient) against real libzmq ROUTER
sockets on loopback."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import msgpack
import pytest
import zmq
from godot_helpers import run_godot

pytestmark = pytest.mark.slow


def _echo(messages: list[list[bytes]]) -> list[list[bytes]]:
    """Echo each message; "multi" gets a three-part answer."""
    replies = [[identity, *([b"one", b"two", b"three"] if parts == [b"multi"] else parts)] for identity, *parts in messages]
    messages.clear()
    return replies


def _reverse_replies(messages: list[list[bytes]]) -> list[list[bytes]]:
    """Hold three requests, then answer them last first, echoing each body."""
    if len(messages) < 3:
        return []
    replies = []
    for identity, payload in reversed(messages):
        request = msgpack.unpackb(payload)
        reply = {"v": 1, "id": request["id"], "type": request["type"] + ".ok", "body": request["body"]}
        replies.append([identity, msgpack.packb(reply)])
    messages.clear()
    return replies


def _silent(messages: list[list[bytes]]) -> list[list[bytes]]:
    messages.clear()
    return []


@contextmanager
def router(respond: Callable[[list[list[bytes]]], list[list[bytes]]], **options: int) -> Iterator[str]:
    """A ROUTER thread: each received message is added to a list, and `respond` turns that list
    into the messages to send (clearing what it answered)."""
    context = zmq.Context.instance()
    socket = context.socket(zmq.ROUTER)
    for option, value in options.items():
        socket.setsockopt(getattr(zmq, option), value)
    port = socket.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()
    received: list[list[bytes]] = []

    def serve() -> None:
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        while not stop.is_set():
            if not poller.poll(50):
                continue
            received.append(socket.recv_multipart())
            for message in respond(received):
                socket.send_multipart(message)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(timeout=5)
        socket.close(linger=0)


def test_dealer_against_libzmq_router() -> None:
    with router(_echo) as plain, router(_echo, HEARTBEAT_IVL=100, HEARTBEAT_TIMEOUT=1000) as heartbeat:
        env = {"LOREGUARD_TEST_ROUTER": plain, "LOREGUARD_TEST_ROUTER_HEARTBEAT": heartbeat}
        result = run_godot(["-s", "res://tests/test_dealer.gd"], timeout=120, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"^(\d+) passed, 0 failed$", output, re.MULTILINE), output
    assert int(re.search(r"^(\d+) passed", output, re.MULTILINE).group(1)) >= 20, output


def test_client_matches_replies_by_id_and_times_out() -> None:
    with router(_reverse_replies) as reverse, router(_silent) as silent:
        env = {"LOREGUARD_TEST_REVERSE": reverse, "LOREGUARD_TEST_SILENT": silent}
        result = run_godot(["-s", "res://tests/test_client.gd"], timeout=120, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"^(\d+) passed, 0 failed$", output, re.MULTILINE), output
