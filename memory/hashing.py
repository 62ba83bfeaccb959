"""Canonical serialization and content hashes.

One byte string per value, on every machine: keys sorted, no insignificant whitespace, UTF-8,
floats in Python's shortest round-trip form, NaN and infinity refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a pydantic model or a JSON-compatible value."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """sha256 of `canonical_json(value)`."""
    return sha256_hex(canonical_json(value))
