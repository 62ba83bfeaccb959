"""The GDScript MessagePack codec against vectors written by Python's msgpack, in a real Godot."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import msgpack
from godot_helpers import run_godot

INT_BOUNDARIES = sorted(
    {0, 1, 31, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
     -1, -31, -32, -33, -127, -128, -129, -32767, -32768, -32769, -(2**31) + 1, -(2**31), -(2**31) - 1, -(2**63)}
)  # fmt: skip
FLOATS = [0.0, -0.0, 1.5, -2.25, 0.1, 1e300, -1e-300, 5e-324, 3.141592653589793, 2.0**53 + 1]


def _tag(value: object) -> dict:
    """The tagged JSON form the GDScript test turns back into a Variant."""
    if value is None:
        return {"nil": None}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        return {"float": struct.pack(">d", value).hex()}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes):
        return {"bin": value.hex()}
    if isinstance(value, list):
        return {"array": [_tag(v) for v in value]}
    if isinstance(value, dict):
        return {"map": [[_tag(k), _tag(v)] for k, v in value.items()]}
    raise TypeError(type(value))


def _vectors() -> list[dict]:
    values: list[tuple[str, object]] = [("nil", None), ("true", True), ("false", False)]
    values += [(f"int {v}", v) for v in INT_BOUNDARIES]
    values += [(f"float {v!r}", v) for v in FLOATS]
    values += [("empty str", ""), ("fixstr", "hello"), ("str8", "x" * 32), ("str16", "y" * 300), ("str32", "z" * 70000),
               ("unicode", "Grüße, 勇者 🐉"), ("empty bin", b""), ("bin8", b"\x00\xff" * 5), ("bin16", bytes(range(256)) * 2),
               ("str is not bin", ["abc", b"abc"]), ("fixarray", [1, "two", 3.0, None]), ("array16", list(range(20))),
               ("nested", {"v": 1, "id": 7, "type": "interact", "body": {"npc_id": "guard", "tags": ["a", "b"],
                           "deep": [[[{"x": [1.5, -2]}]]]}}),
               ("map16", {f"k{i}": i for i in range(20)}), ("int keys", {1: "one", -2: "minus two"})]  # fmt: skip
    vectors = [{"name": name, "hex": msgpack.packb(v, use_bin_type=True).hex(), "value": _tag(v)} for name, v in values]
    # Non-canonical forms Python also accepts: wider encodings of small numbers, float32.
    vectors += [
        {"name": "uint16 holding 1", "hex": "cd0001", "value": {"int": "1"}, "canonical": False},
        {"name": "int64 holding -1", "hex": "d3ffffffffffffffff", "value": {"int": "-1"}, "canonical": False},
        {"name": "float32 1.5", "hex": "ca3fc00000", "value": {"float": struct.pack(">d", 1.5).hex()}, "canonical": False},
    ]
    errors = {
        "uint64 above int64": msgpack.packb(2**64 - 1),
        "uint64 2^63": msgpack.packb(2**63),
        "truncated int": msgpack.packb(70000)[:-1],
        "truncated str": msgpack.packb("hello")[:-2],
        "truncated map": msgpack.packb({"a": 1, "b": 2})[:-1],
        "trailing bytes": msgpack.packb(1) + b"\x01",
        "ext type": msgpack.packb(msgpack.ExtType(1, b"x")),
        "timestamp ext": bytes.fromhex("d6ff00000001"),
        "invalid utf-8": b"\xa2\xff\xfe",
        "reserved 0xc1": b"\xc1",
        "empty input": b"",
        "too deep": b"\x91" * 100 + b"\xc0",
        "map key is a map": b"\x81\x80\x01",
        "huge array count, no items": b"\xdd\xff\xff\xff\xff",
    }
    vectors += [{"name": name, "hex": data.hex(), "error": True} for name, data in errors.items()]
    return vectors


def test_gdscript_codec_matches_python_msgpack(tmp_path: Path) -> None:
    vectors = _vectors()
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(vectors))
    result = run_godot(["-s", "res://tests/test_msgpack.gd", "--", str(path)])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    summary = [line for line in result.stdout.splitlines() if line.endswith("failed")]
    assert summary and summary[-1].endswith(" 0 failed"), output[-4000:]
    assert int(summary[-1].split()[0]) >= len(vectors)
    assert "SCRIPT ERROR" not in output, output[-4000:]
