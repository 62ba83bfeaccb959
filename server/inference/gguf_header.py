"""Read a GGUF file's metadata without loading it: enough to refuse a bad file before llama.cpp
maps gigabytes, and to see what a model outside the catalogue says about itself.

GGUF (v2 and v3) starts with the magic `GGUF`, a version, the tensor and key counts, then typed
key/value pairs. Only the scalar and string values are kept; arrays (the tokenizer's vocabulary)
are skipped, but their token texts are kept for the few keys that name special tokens.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
#: type id -> struct format of the fixed-size value types.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
#: Arrays whose items are kept: the token texts, to name the special tokens.
_KEPT_ARRAYS = {"tokenizer.ggml.tokens"}


class NotGGUF(ValueError):
    """The file is not a GGUF model (wrong magic, unknown version or a truncated header)."""


@dataclass
class GGUFHeader:
    version: int
    metadata: dict[str, object] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) and value else None

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return value if isinstance(value, int) else None

    def token(self, key: str) -> str | None:
        """The text of the token whose id is stored under `key` (e.g. tokenizer.ggml.eos_token_id)."""
        value = self.metadata.get(key)
        if isinstance(value, int) and 0 <= value < len(self.tokens):
            return self.tokens[value]
        return None


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise NotGGUF("the GGUF header is truncated")
    return data


def _unpack(f: BinaryIO, fmt: str) -> object:
    return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    n = int(_unpack(f, "<Q"))  # type: ignore[call-overload]
    if n > 1 << 30:
        raise NotGGUF("the GGUF header holds an implausibly long string")
    return _read(f, n).decode("utf-8", "replace")


def _value(f: BinaryIO, kind: int, keep: bool) -> object:
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item_kind = int(_unpack(f, "<I"))  # type: ignore[call-overload]
        count = int(_unpack(f, "<Q"))  # type: ignore[call-overload]
        if item_kind in _SCALARS and not keep:
            f.seek(struct.calcsize(_SCALARS[item_kind]) * count, 1)  # skip without reading
            return None
        items = [_value(f, item_kind, False) for _ in range(count)]
        return items if keep else None
    raise NotGGUF(f"unknown GGUF value type {kind}")


def read_header(path: Path) -> GGUFHeader:
    """The metadata of the GGUF file at `path`; NotGGUF when it is not one."""
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise NotGGUF(f"{path.name} is not a GGUF file (llama.cpp models are .gguf files)")
        version = int(_unpack(f, "<I"))  # type: ignore[call-overload]
        if version not in (2, 3):
            raise NotGGUF(f"{path.name} is GGUF version {version}; this llama.cpp reads versions 2 and 3")
        _unpack(f, "<Q")  # tensor count
        n_keys = int(_unpack(f, "<Q"))  # type: ignore[call-overload]
        header = GGUFHeader(version=version)
        for _ in range(n_keys):
            key = _string(f)
            kind = int(_unpack(f, "<I"))  # type: ignore[call-overload]
            value = _value(f, kind, key in _KEPT_ARRAYS)
            if key in _KEPT_ARRAYS and isinstance(value, list):
                header.tokens = [str(v) for v in value]
            elif value is not None:
                header.metadata[key] = value
        return header


def write_header(path: Path, metadata: dict[str, object]) -> None:
    """A GGUF file holding only `metadata` (strings and ints) and no tensors: test fixtures for the
    checks that run before a model loads."""
    out = bytearray(MAGIC + struct.pack("<IQQ", 3, 0, len(metadata)))
    for key, value in metadata.items():
        raw_key = key.encode()
        out += struct.pack("<Q", len(raw_key)) + raw_key
        if isinstance(value, str):
            raw = value.encode()
            out += struct.pack("<IQ", _STRING, len(raw)) + raw
        elif isinstance(value, int):
            out += struct.pack("<Iq", 11, value)
        else:
            raise TypeError(f"write_header writes strings and ints, not {type(value).__name__}")
    path.write_bytes(bytes(out))
