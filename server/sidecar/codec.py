"""Request frames to validated requests: MessagePack with hard limits and typed protocol errors.

The envelope's plain encoders (`encode_reply`, `encode_error`, the client's `encode_request` and
`decode_reply`) live with the envelope in `loreguard.schemas.wire`; this module is the sidecar's
strict side.

Decoding checks, in order: size, MessagePack, map with string keys, envelope fields, version,
message type, body schema (every body model refuses NaN and infinities: `allow_inf_nan=False`). The first failure becomes a `ProtocolError` carrying the error code
PROTOCOL.md assigns and, whenever the envelope got far enough to have one, the request id, so the
client can match the error to its request.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import msgpack
from pydantic import BaseModel, ValidationError

from loreguard.memory.errors import StorageUnavailableError
from loreguard.schemas.wire import MESSAGES, SUPPORTED_VERSIONS, ErrorCode, encode_error, encode_reply

log = logging.getLogger("loreguard.sidecar")

_MAX_ID_CHARS = 128
_INT_RANGE = (-(2**63), 2**64 - 1)


class ProtocolError(Exception):
    def __init__(self, code: ErrorCode, message: str, *, request_id: Any = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.details = details


class Request:
    """A decoded, validated request: its id, type and body model."""

    __slots__ = ("id", "type", "body")

    def __init__(self, request_id: int | str, message_type: str, body: BaseModel) -> None:
        self.id = request_id
        self.type = message_type
        self.body = body


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"MessagePack extension type {code} is not part of the protocol")


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return _INT_RANGE[0] <= value <= _INT_RANGE[1]
    return isinstance(value, str) and len(value) <= _MAX_ID_CHARS


def _error_details(exc: ValidationError) -> dict[str, Any]:
    return {
        "errors": [
            {"path": ".".join(str(part) for part in error["loc"]), "reason": error["msg"], "kind": error["type"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
    }


def decode_request(frame: bytes, *, max_bytes: int) -> Request:
    """Decode and validate one request frame, or raise `ProtocolError`."""
    if len(frame) > max_bytes:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"message of {len(frame)} bytes exceeds the limit of {max_bytes}")
    try:
        data = msgpack.unpackb(
            frame,
            raw=False,
            strict_map_key=False,
            ext_hook=_reject_ext,
            timestamp=0,
        )  # unpackb caps string, array and map lengths by the frame's own length
    except Exception as exc:  # msgpack raises many types (ExtraData, FormatError, StackError, UnicodeDecodeError...)
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"not a MessagePack message: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "a request must be a MessagePack map")
    request_id = data.get("id") if _valid_id(data.get("id")) else None
    if not all(isinstance(key, str) for key in data):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "envelope keys must be strings", request_id=request_id)
    extra = sorted(set(data) - {"v", "id", "type", "body"})
    if extra:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"unknown envelope fields: {', '.join(extra)}", request_id=request_id)
    if request_id is None:
        raise ProtocolError(ErrorCode.BAD_REQUEST, "`id` must be an integer or a string of at most 128 characters")
    version = data.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "`v` must be an integer", request_id=request_id)
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"protocol version {version} is not supported",
            request_id=request_id,
            details={"supported": list(SUPPORTED_VERSIONS)},
        )
    message_type = data.get("type")
    if not isinstance(message_type, str):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "`type` must be a string", request_id=request_id)
    body = data.get("body")
    if not isinstance(body, dict):
        raise ProtocolError(ErrorCode.BAD_REQUEST, "`body` must be a map", request_id=request_id)
    spec = MESSAGES.get(message_type)
    if spec is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE, f"unknown message type {message_type[:64]!r}", request_id=request_id,
            details={"known": sorted(MESSAGES)},
        )  # fmt: skip
    try:
        model = spec.request.model_validate(body)
    except ValidationError as exc:
        raise ProtocolError(
            ErrorCode.INVALID, f"invalid {message_type} body", request_id=request_id, details=_error_details(exc)
        ) from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise ProtocolError(
            ErrorCode.INVALID, f"invalid {message_type} body: {type(exc).__name__}", request_id=request_id
        ) from None
    return Request(request_id, message_type, model)


def storage_error(request_id: Any, exc: StorageUnavailableError) -> bytes:
    """The `storage_unavailable` error of a write the disk refused: rolled back whole, nothing
    changed; `details.fault` says why for the game, `details.reason` in plain words. The memory
    file logs the fault once (not this, not per request)."""
    details = {"fault": exc.fault.value, "reason": exc.reason}
    return encode_error(request_id, ErrorCode.STORAGE_UNAVAILABLE, str(exc), details)


def internal_error(request_id: Any, where: str) -> bytes:
    """Log a bug with a fresh correlation id and return the `internal` error naming it."""
    correlation = uuid.uuid4().hex[:12]
    log.exception("internal error %s in %s", correlation, where)
    return encode_error(
        request_id, ErrorCode.INTERNAL, f"internal error; correlation id {correlation}", {"correlation_id": correlation}
    )


__all__ = ["ProtocolError", "Request", "decode_request", "encode_error", "encode_reply", "internal_error"]
