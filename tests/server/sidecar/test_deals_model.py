"""Deals through the wire on the real embedded model (issue 58): whatever the model would have
said, the outcome follows the rules (the purse short, out of stock, paid enough, paid in words
but not in the purse), the game gets exactly the sale, and the line heard agrees with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sidecar_helpers import running_sidecar

from loreguard.client import Client
from loreguard.server.demo import demo_npcs
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.pipeline.gate.deeds import find_grants_in_words_only
from loreguard.server.pipeline.turn.intents import refusal
from loreguard.text.stock_talk import denied_ware

pytestmark = pytest.mark.model

MERCHANT = next(p for p in demo_npcs() if p.id == "merchant")
GIVE = MERCHANT.allowed_intents[0]

#: (the game's state, the player's line, the sale the rules make or None, the reason's start)
CASES = [
    ({"player.purse": 5}, "Sell me some rope, please.", None, "the player has 5 copper"),
    ({"player.purse": 120, "merchant.lanterns": 0}, "I'll buy a lantern.", None, "you have none left of lantern"),
    ({"player.purse": 120}, "Sell me some rope, please.", {"item": "rope", "count": 1}, "sells 1 rope for 2 silver"),
    ({"player.purse": 4}, "I'll buy a rope. Here are three silver.", None, "the player has 4 copper"),
]


def test_the_outcome_follows_the_rules_and_the_line_agrees(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    with running_sidecar(tmp_path, llama_backend) as sidecar, Client(sidecar.address, timeout_s=600) as client:  # type: ignore[arg-type]
        for state, line, sale, why in CASES:
            client.set_state(state)
            result = client.interact("merchant", line, scene="eldmoor")
            (deal,) = result.receipt.deals
            assert deal.reason.startswith(why) and deal.granted is (sale is not None), deal
            heard = result.dialogue
            if sale is None:
                assert result.intents == (), (line, result.intents)
                assert not find_grants_in_words_only(heard, (), (GIVE,), (), MERCHANT.name), heard
            else:
                (intent,) = result.intents
                assert intent.params == sale and intent.payment is not None and intent.payment.value == 20
                assert not refusal(heard) and denied_ware(heard, list(GIVE.wares)) is None, heard
            print(f"{line!r} with {state}: {deal.reason} -> {heard!r} ({result.outcome.value})")
