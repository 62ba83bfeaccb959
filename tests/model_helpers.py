"""Helpers for tests against the real model: the recording backend and the demo store."""

from __future__ import annotations

from stores import demo_store

from loreguard.server.inference.recording import RecordingBackend

#: Kept under the name the tests use.
Recording = RecordingBackend

__all__ = ["Recording", "demo_store"]
