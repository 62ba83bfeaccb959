"""Stage 6: inference backends behind one interface."""

from loreguard.server.inference.base import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    Generation,
    GenerationRequest,
    InferenceBackend,
)
from loreguard.server.inference.scripted import ScriptedBackend, ScriptExhausted

__all__ = [
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "Generation",
    "GenerationRequest",
    "InferenceBackend",
    "ScriptExhausted",
    "ScriptedBackend",
]
