"""`bench soak`, small: the long game runs through the real pipeline, SQLite file and recorder
without losing or falling back on an interaction, replays exactly, and remembers what it was told."""

from __future__ import annotations

import pytest

from loreguard.memory import MemoryPolicy
from loreguard.server.bench.soak import bench_soak


@pytest.mark.slow
def test_a_short_soak_remembers_replays_and_loses_nothing() -> None:
    # A limit of 48 with 1,500 lines over 8 NPCs: the busiest NPCs consolidate many times over.
    figures = bench_soak(npcs=8, interactions=1_500, window=500, planted=16, policy=MemoryPolicy(episodic_limit=48))
    assert figures["lost"] == 0
    assert figures["fallbacks"] == 0, figures["fallback_reasons"]
    assert figures["replay_exact"] == figures["replayed"] == 500
    assert figures["load_same_hash"] is True
    assert figures["recall_at_5"] >= 0.9
    assert {f"window_{n:02d}_p50_us" for n in range(3)} <= figures.keys()
