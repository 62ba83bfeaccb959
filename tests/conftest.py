from __future__ import annotations

from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile

from loreguard.memory import MemoryStore


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


@pytest.fixture
def store(store_path: Path):
    with MemoryStore(store_path) as s:
        s.load_world(eldmoor_world())
        s.register_npc(guard_profile())
        yield s


@pytest.fixture(scope="session")
def llama_backend():
    """The embedded model on the batched engine (the sidecar's default), loaded once for every
    model test (all cores: tests run alone)."""
    import os

    from loreguard.server.pipeline.inference.llama_backend import LlamaCppBackend, LlamaCppConfig

    backend = LlamaCppBackend(LlamaCppConfig(n_threads=os.cpu_count() or 1, parallel=4))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def reproducible_backend():
    """The embedded model on the reproducible engine: same prompt and seed, same text, always."""
    import os

    from loreguard.server.pipeline.inference.llama_backend import LlamaCppBackend, LlamaCppConfig

    backend = LlamaCppBackend(LlamaCppConfig(n_threads=os.cpu_count() or 1, reproducible=True))
    yield backend
    backend.close()
