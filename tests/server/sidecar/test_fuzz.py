"""5,000+ malformed and edge-case messages over a real socket: each gets a typed error, nothing changes."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
import zmq
from sidecar_helpers import running_sidecar
from waiting import counter, wait_for

from loreguard.client import Client
from loreguard.schemas.wire import MESSAGES, ErrorCode

CODES = {code.value for code in ErrorCode}
VALID_CONTEXT = {"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "hi"}


def _envelope(rid: object, mtype: object, body: object, v: object = 1) -> bytes:
    return msgpack.packb({"v": v, "id": rid, "type": mtype, "body": body}, use_bin_type=True)


def _pairs(**fields: object) -> bytes:
    return b"".join(msgpack.packb(key) + msgpack.packb(value) for key, value in fields.items())


def _nested(depth: int) -> bytes:
    """An interact whose npc_id nests `depth` arrays, written by hand (packb refuses deep nesting)."""
    inner = b"\x91" * depth + b"\xc0"
    return b"\x84" + _pairs(v=1, id=1, type="interact") + msgpack.packb("body") + b"\x81" + msgpack.packb("npc_id") + inner


def _ext_version() -> bytes:
    """`v` holds a MessagePack extension value (fixext 1, type 1)."""
    return b"\x84" + msgpack.packb("v") + b"\xd4\x01\x00" + _pairs(id=1, type="hello", body={})


def _invalid_utf8_type() -> bytes:
    return b"\x84" + _pairs(v=1, id=5) + msgpack.packb("type") + b"\xa2\xff\xfe" + _pairs(body={})


def _huge_int_id() -> bytes:
    # uint64 max is allowed; a float where an integer belongs is not.
    return _envelope(2**64 - 1, "hello", {"versions": [2**63]})


def _cases(rng: random.Random) -> list[tuple[str, Callable[[], bytes]]]:
    types = sorted(MESSAGES)
    return [
        ("random bytes", lambda: rng.randbytes(rng.randint(0, 64))),
        ("truncated msgpack", lambda: _envelope(rng.randint(0, 9), "interact", VALID_CONTEXT)[: rng.randint(1, 40)]),
        ("not a map", lambda: msgpack.packb(rng.choice([[1, 2], "hello", 3, None, True, 1.5]))),
        ("non-string keys", lambda: msgpack.packb({1: 1, "id": 3, "type": "hello", "body": {}})),
        ("missing body", lambda: msgpack.packb({"v": 1, "id": 4, "type": "hello"})),
        ("extra envelope field", lambda: msgpack.packb({"v": 1, "id": 4, "type": "hello", "body": {}, "x": 1})),
        ("wrong id type", lambda: _envelope(rng.choice([1.5, [1], {"a": 1}, True, "x" * 300]), "hello", {})),
        ("wrong version", lambda: _envelope(5, "hello", {}, v=rng.choice([0, 2, 99, -1, "1", 1.0]))),
        ("unknown type", lambda: _envelope(6, rng.choice(["", "npc.delete", "HELLO", "x" * 70, "interact.ok"]), {})),
        ("wrong body type", lambda: _envelope(7, rng.choice(types), rng.choice([[], "body", 3, None]))),
        ("invalid body", lambda: _envelope(8, rng.choice(types), {"npc_id": rng.choice([5, "", "bad id!", None]), "zz": 1})),
        ("wrong field types", lambda: _envelope(9, "interact", {**VALID_CONTEXT, "tags": rng.choice([5, "t", [1, 2]])})),
        ("unknown field", lambda: _envelope(10, "interact", {**VALID_CONTEXT, "authority": "designer"})),
        ("huge integers", lambda: _envelope(11, "interact", {**VALID_CONTEXT, "interaction_count": 2**64 - 1})),
        ("huge id", _huge_int_id),
        (
            "NaN",
            lambda: _envelope(12, "world.set_state", {"values": {"x": rng.choice([float("nan"), float("inf"), -float("inf")])}}),
        ),
        ("NaN in interact", lambda: _envelope(13, "interact", {**VALID_CONTEXT, "player_input": float("nan")})),
        ("deep nesting", lambda: _nested(rng.choice([100, 1000, 5000]))),
        ("invalid UTF-8", _invalid_utf8_type),
        ("ext type", _ext_version),
        ("float for int", lambda: _envelope(14, "audit.tail", {"limit": 2.5})),
        ("out of range", lambda: _envelope(15, "audit.tail", {"limit": rng.choice([0, -1, 10**9])})),
        ("forbidden write", lambda: _envelope(16, "world.set_state", {"npc_id": "nobody", "values": {"a": 1}})),
        ("long string", lambda: _envelope(17, "interact", {**VALID_CONTEXT, "player_input": "x" * 5000})),
        ("unknown npc", lambda: _envelope(18, "interact", {**VALID_CONTEXT, "npc_id": "ghost"})),
        ("NaN version", lambda: b"\x84\xa1v\xcb" + struct.pack(">d", float("nan")) + _pairs(id=1, type="hello", body={})),
    ]


@pytest.mark.slow
def test_fuzzed_messages_get_typed_errors_and_change_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    cases = _cases(rng)
    with running_sidecar(tmp_path, max_message_bytes=64 * 1024) as sidecar:
        hash_before = sidecar.store.memory_hash()
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(sidecar.address)
        sent, replies, kinds = 0, 0, set()
        for batch in range(50):
            for _ in range(110):
                name, make = cases[rng.randrange(len(cases))]
                kinds.add(name)
                sock.send(make())
                sent += 1
            while replies < sent:
                assert sock.poll(10_000), f"{sent - replies} messages got no reply (batch {batch})"
                reply = msgpack.unpackb(sock.recv(), raw=False)
                assert reply["type"] == "error" and reply["body"]["code"] in CODES, reply
                assert reply["body"]["code"] != "internal", reply
                replies += 1
        # Oversized frames: the peer is dropped (PROTOCOL.md), the sidecar lives on.
        with Client(sidecar.address, timeout_s=30) as client:
            for dropped in range(1, 4):
                big = zmq.Context.instance().socket(zmq.DEALER)
                big.setsockopt(zmq.LINGER, 0)
                big.connect(sidecar.address)
                big.send(b"\x00" * (128 * 1024))
                wait_for(
                    lambda n=dropped: counter(client, "clients.disconnected") == n, f"oversized peer {dropped} to be dropped"
                )
                assert not big.poll(0)
                big.close()
            sock.close()

            assert sent >= 5000 and kinds == {name for name, _ in cases}
            assert sidecar.store.memory_hash() == hash_before
            assert client.interact("guard", "Still standing?").dialogue
