"""Helpers for tests against the real model: a recording backend and the demo store."""

from __future__ import annotations

from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.pipeline.inference.base import Generation, GenerationRequest, InferenceBackend


class Recording(InferenceBackend):
    """Forwards to a real backend and keeps every request and generation."""

    def __init__(self, inner: InferenceBackend) -> None:
        self.inner = inner
        self.calls: list[tuple[GenerationRequest, Generation]] = []

    def generate(self, request: GenerationRequest) -> Generation:
        generation = self.inner.generate(request)
        self.calls.append((request, generation))
        return generation

    def fingerprint(self) -> ModelFingerprint:
        return self.inner.fingerprint()


def demo_store(path: Path) -> MemoryStore:
    store = MemoryStore(path)
    assert store.load_world(demo_world()).committed
    for profile in demo_npcs():
        assert store.register_npc(profile).committed
    return store
