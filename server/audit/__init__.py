"""The black box: audit records, debug packages and replay with drift detection."""

from loreguard.server.audit.recorder import DEFAULT_RING_SIZE, AuditRecorder, NoRecordsError

__all__ = ["AuditRecorder", "DEFAULT_RING_SIZE", "NoRecordsError"]
