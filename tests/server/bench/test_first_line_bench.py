"""`loreguard bench first-line` on the embedded model, through real `serve` processes: a warmed
NPC's first line evaluates only the player's message, a cold one its whole prompt; a relaunch
restores what the first launch evaluated."""

from __future__ import annotations

import pytest

from loreguard.server.bench.first_line import MODES, bench_first_line

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_a_warmed_npc_evaluates_only_the_players_message() -> None:
    figures = bench_first_line(launches=1, typing_s=0.0)
    for mode in MODES:
        assert figures[f"{mode}_first_words_ms"] > 0  # type: ignore[operator]
    cold, warmed = figures["cold_prefill_tokens"], figures["warmed_prefill_tokens"]
    # the demo's first line and the headings around it: tens of tokens, against the whole prompt
    assert warmed < 100 < cold  # type: ignore[operator]
    assert figures["warmed_warm_ms"] > 0  # type: ignore[operator]
    # The second launch restored both NPCs' prompts from its data folder: nothing left to evaluate.
    assert figures["relaunch_prefill_tokens"] == warmed
    assert figures["relaunch_warm_ms"] < figures["warmed_warm_ms"]  # type: ignore[operator]
