"""`loreguard bench town` on the embedded model: a relaunch restores every NPC's prompt that the
first launch evaluated, for a fraction of its time."""

from __future__ import annotations

import pytest

from loreguard.server.bench.town import bench_town

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_a_restored_town_is_ready_in_a_fraction_of_the_cold_time() -> None:
    figures = bench_town(npcs=3, rounds=1, threads=2)
    assert figures["prompt_tokens"] > 500  # type: ignore[operator]
    assert figures["state_mib"] > 1  # type: ignore[operator]
    # Restoring reads a few MiB per NPC; evaluating runs the model over hundreds of tokens.
    assert figures["restored_over_cold"] < 0.5  # type: ignore[operator]
