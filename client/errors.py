"""Typed errors for the client: one class per protocol error code."""

from __future__ import annotations

from typing import Any

from loreguard.schemas.wire import ErrorCode


class LoreguardError(Exception):
    """The sidecar answered with an error envelope."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, request_id: Any = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.details = details or {}

    def detail(self, key: str, default: str = "") -> str:
        """`details[key]` as text (`default` when the sidecar sent none)."""
        return str(self.details.get(key, default))


class BadRequest(LoreguardError):
    code = ErrorCode.BAD_REQUEST


class UnsupportedVersion(LoreguardError):
    code = ErrorCode.UNSUPPORTED_VERSION


class UnknownType(LoreguardError):
    code = ErrorCode.UNKNOWN_TYPE


class Invalid(LoreguardError):
    code = ErrorCode.INVALID


class NotFound(LoreguardError):
    code = ErrorCode.NOT_FOUND


class Forbidden(LoreguardError):
    code = ErrorCode.FORBIDDEN


class Overloaded(LoreguardError):
    code = ErrorCode.OVERLOADED


class Timeout(LoreguardError):
    code = ErrorCode.TIMEOUT


class StorageUnavailable(LoreguardError):
    """The sidecar could not save what was asked (the disk is full, the save folder is gone or
    read-only): nothing was changed, and the next request tries again. `fault` is one of
    `disk_full`, `not_writable`, `folder_gone`, `locked`, `io_error`; `reason` says it in words."""

    code = ErrorCode.STORAGE_UNAVAILABLE

    @property
    def fault(self) -> str:
        return self.detail("fault")

    @property
    def reason(self) -> str:
        return self.detail("reason", self.message)


class Cancelled(LoreguardError):
    """The request was cancelled before it committed (`interact.cancel`, or its scene ended):
    nothing of it was applied. `by` is `game` or `scene_end`; `phase` where it stopped."""

    code = ErrorCode.CANCELLED

    @property
    def by(self) -> str:
        return self.detail("by")

    @property
    def phase(self) -> str:
        return self.detail("phase")


class Internal(LoreguardError):
    code = ErrorCode.INTERNAL


class NoReply(TimeoutError):
    """No reply arrived within the client's own timeout (the sidecar may be down)."""


ERRORS: dict[str, type[LoreguardError]] = {cls.code.value: cls for cls in LoreguardError.__subclasses__()}


def error_from_envelope(envelope: dict[str, Any]) -> LoreguardError:
    body = envelope.get("body") or {}
    cls = ERRORS.get(str(body.get("code")), LoreguardError)
    return cls(str(body.get("message", "")), request_id=envelope.get("id"), details=body.get("details"))
