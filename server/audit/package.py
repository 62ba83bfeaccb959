"""Debug package files: JSON to read, compressed to send. Both carry an integrity hash.

JSON form, pretty-printed with sorted keys:

    {"loreguard_debug_package": 1, "sha256": "<hex>", "package": {...}}

Compressed form (zlib, so the Godot editor can open it with `decompress_dynamic(DEFLATE)`):

    8-byte magic  b"\\x89LGDP\\r\\n\\x1a"   (PNG-style: catches text-mode and truncation damage)
    1 byte        format version
    32 bytes      sha256 of the zlib stream that follows
    rest          zlib stream of the package's canonical JSON

The JSON form's hash covers the package's canonical JSON, so any changed byte that survives
parsing changes the hash, and the rest fail to parse. The compressed form's hash covers the
stream's bytes themselves (a deflate stream has bits that do not change what it inflates to).
`read_package` tells the forms apart by the magic and verifies before anything is trusted.
"""

from __future__ import annotations

import json
import os
import zlib
from enum import Enum
from pathlib import Path

from pydantic import ValidationError

from loreguard.memory import canonical_json, sha256_hex
from loreguard.schemas.audit import PACKAGE_FORMAT_VERSION, DebugPackage

MAGIC = b"\x89LGDP\r\n\x1a"
_HEADER = len(MAGIC) + 1 + 32
_JSON_KEY = "loreguard_debug_package"


class PackageFormat(str, Enum):
    JSON = "json"
    COMPRESSED = "compressed"


class PackageError(ValueError):
    """The file is not a debug package this Loreguard can read."""


class PackageIntegrityError(PackageError):
    """The package was changed after it was written (or damaged on the way)."""


def package_document(package: DebugPackage) -> dict:
    """The JSON form as a value (what `audit.export` sends on the wire)."""
    content = package.model_dump(mode="json")
    return {_JSON_KEY: PACKAGE_FORMAT_VERSION, "sha256": sha256_hex(canonical_json(content)), "package": content}


def encode_package(package: DebugPackage, form: PackageFormat) -> bytes:
    if form is PackageFormat.JSON:
        text = json.dumps(package_document(package), indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False)
        return (text + "\n").encode("utf-8")
    stream = zlib.compress(canonical_json(package), 9)
    return MAGIC + bytes([PACKAGE_FORMAT_VERSION]) + bytes.fromhex(sha256_hex(stream)) + stream


def decode_package(data: bytes) -> tuple[DebugPackage, PackageFormat]:
    """Read either form, verify its integrity hash, and validate it. Raises `PackageError`
    (`PackageIntegrityError` when the content does not match its hash)."""
    if data.startswith(MAGIC):
        return _decode_compressed(data), PackageFormat.COMPRESSED
    if data[:1] == MAGIC[:1]:
        raise PackageError("damaged compressed package: the magic header does not match")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PackageError(f"not a Loreguard debug package (neither compressed nor valid JSON: {exc})") from None
    if not isinstance(document, dict) or _JSON_KEY not in document:
        raise PackageError(f"not a Loreguard debug package (no {_JSON_KEY!r} key)")
    if document[_JSON_KEY] != PACKAGE_FORMAT_VERSION:
        raise PackageError(
            f"package format {document[_JSON_KEY]!r} is not supported (this Loreguard reads {PACKAGE_FORMAT_VERSION})"
        )
    if set(document) != {_JSON_KEY, "sha256", "package"}:
        raise PackageIntegrityError(f"unexpected top-level keys {sorted(set(document) - {_JSON_KEY, 'sha256', 'package'})}")
    content = document["package"]
    _verify(canonical_json(content), document["sha256"])
    return _validate(content), PackageFormat.JSON


def _decode_compressed(data: bytes) -> DebugPackage:
    if len(data) < _HEADER:
        raise PackageError("truncated compressed package")
    version = data[len(MAGIC)]
    if version != PACKAGE_FORMAT_VERSION:
        raise PackageError(f"package format {version} is not supported (this Loreguard reads {PACKAGE_FORMAT_VERSION})")
    stream = data[_HEADER:]
    _verify(stream, data[len(MAGIC) + 1 : _HEADER].hex())
    try:
        content = zlib.decompress(stream)
    except zlib.error as exc:  # only reachable with a forged hash
        raise PackageIntegrityError(f"the compressed payload is damaged ({exc})") from None
    try:
        value = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # only reachable with a forged hash
        raise PackageIntegrityError(f"the payload is not JSON ({exc})") from None
    return _validate(value)


def _verify(content: bytes, expected: object) -> None:
    actual = sha256_hex(content)
    if actual != expected:
        raise PackageIntegrityError(
            f"integrity check failed: the content hashes to {actual[:16]}…, the package says {str(expected)[:16]}…; "
            "it was changed after export"
        )


def _validate(value: object) -> DebugPackage:
    try:
        return DebugPackage.model_validate(value)
    except ValidationError as exc:
        raise PackageError(f"the package does not match the debug package schema: {exc.error_count()} errors") from None


def write_package(package: DebugPackage, path: Path, form: PackageFormat | None = None) -> PackageFormat:
    """Write `package` to `path`, whole or not at all (a half-written package never stands in for
    the records: retention deletes them once their archive is written); the form defaults to
    JSON for `*.json`, compressed otherwise. `OSError` (a full disk) leaves no file behind."""
    form = form or (PackageFormat.JSON if path.suffix == ".json" else PackageFormat.COMPRESSED)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as out:
            out.write(encode_package(package, form))
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    return form


def read_package(path: Path) -> tuple[DebugPackage, PackageFormat]:
    return decode_package(path.read_bytes())


__all__ = [
    "MAGIC",
    "PackageError",
    "PackageFormat",
    "PackageIntegrityError",
    "decode_package",
    "encode_package",
    "package_document",
    "read_package",
    "write_package",
]
