from __future__ import annotations

from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile
from gpu_helpers import expose_lavapipe
from stores import open_store

# Before any test loads llama.cpp: the GPU tests' device is fixed at its first load.
expose_lavapipe()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite"


@pytest.fixture
def store(store_path: Path):
    """The Eldmoor world and the guard, on a SQLite file of the test's own."""
    with open_store(store_path, world=eldmoor_world(), npcs=[guard_profile()]) as s:
        yield s


@pytest.fixture(scope="session")
def llama_backend():
    """The embedded model on the batched engine (the sidecar's default), loaded once for every
    model test (all cores: tests run alone)."""
    import os

    from loreguard.server.inference.llama_backend import LlamaCppBackend
    from loreguard.server.inference.llama_config import LlamaCppConfig

    backend = LlamaCppBackend(LlamaCppConfig(n_threads=os.cpu_count() or 1, parallel=4))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def reproducible_backend():
    """The embedded model on the reproducible engine: same prompt and seed, same text, always."""
    import os

    from loreguard.server.inference.llama_backend import LlamaCppBackend
    from loreguard.server.inference.llama_config import LlamaCppConfig

    backend = LlamaCppBackend(LlamaCppConfig(n_threads=os.cpu_count() or 1, reproducible=True))
    yield backend
    backend.close()
