"""The GDScript ZMTP 3.1 framing against byte vectors written from RFC 23/37, in a real Godot."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from godot_helpers import run_godot


def _greeting(mechanism: bytes = b"NULL", major: int = 3, minor: int = 1, as_server: bool = False) -> bytes:
    # signature (0xFF, 8 padding bytes whose last is 1 as libzmq sends, 0x7F), version, mechanism, as-server, filler
    return (
        b"\xff"
        + b"\x00" * 7
        + b"\x01\x7f"
        + bytes([major, minor])
        + mechanism.ljust(20, b"\x00")
        + bytes([as_server])
        + b"\x00" * 31
    )


def _frame(body: bytes, *, more: bool = False, command: bool = False) -> bytes:
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) <= 255:
        return bytes([flags, len(body)]) + body
    return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body


def _command_body(name: bytes, data: bytes) -> bytes:
    return bytes([len(name)]) + name + data


def _properties(**props: str) -> bytes:
    out = b""
    for key, value in props.items():
        k, v = key.replace("_", "-").encode(), value.encode()
        out += bytes([len(k)]) + k + struct.pack(">I", len(v)) + v
    return out


def _vectors() -> dict:
    short, long = b"\x84\xa1v\x01", bytes(range(256)) + b"tail" * 20
    context = b"ctx-1"
    router_ready = _command_body(b"READY", _properties(Socket_Type="ROUTER", Identity=""))
    ping_body = _command_body(b"PING", struct.pack(">H", 300) + context)
    stream_frames = [
        (router_ready, False, True),
        (short, False, False),
        (short, True, False),
        (b"", True, False),
        (long, False, False),
        (ping_body, False, True),
    ]
    stream = b"".join(_frame(body, more=more, command=command) for body, more, command in stream_frames)
    return {
        "greeting": _greeting().hex(),
        "server_greeting": _greeting(as_server=True).hex(),
        "curve_greeting": _greeting(b"CURVE").hex(),
        "zmtp2_greeting": _greeting(major=2, minor=0).hex(),
        "ready_dealer": _frame(_command_body(b"READY", _properties(Socket_Type="DEALER")), command=True).hex(),
        "short_body": short.hex(),
        "short_frame": _frame(short).hex(),
        "long_body": long.hex(),
        "long_frame": _frame(long).hex(),
        "multipart": (_frame(short, more=True) + _frame(b"", more=True) + _frame(long)).hex(),
        "ping_context": context.hex(),
        "ping": _frame(ping_body, command=True).hex(),
        "pong": _frame(_command_body(b"PONG", context), command=True).hex(),
        "ping_body": ping_body.hex(),
        "router_ready_body": router_ready.hex(),
        "stream": stream.hex(),
        "stream_frames": [{"body": b.hex(), "more": m, "command": c} for b, m, c in stream_frames],
    }


def test_gdscript_zmtp_framing_matches_the_rfc(tmp_path: Path) -> None:
    path = tmp_path / "zmtp.json"
    path.write_text(json.dumps(_vectors()))
    result = run_godot(["-s", "res://tests/test_zmtp.gd", "--", str(path)])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "SCRIPT ERROR" not in output, output[-4000:]
    summary = [line for line in result.stdout.splitlines() if line.endswith("failed")]
    assert summary and summary[-1].endswith(" 0 failed") and int(summary[-1].split()[0]) >= 30, output[-4000:]
