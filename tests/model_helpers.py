"""Helpers for tests against the real model: the recording backend and the demo store."""

from __future__ import annotations

from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.pipeline.inference.recording import RecordingBackend

#: Kept under the name the tests use.
Recording = RecordingBackend


def demo_store(path: Path) -> MemoryStore:
    store = MemoryStore(path)
    assert store.load_world(demo_world()).committed
    for profile in demo_npcs():
        assert store.register_npc(profile).committed
    return store
