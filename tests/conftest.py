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
