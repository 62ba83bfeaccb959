"""Deals the rules decide (issue 58): the designer's wares and the game's state decide a request,
the prompt tells the model the outcome, the grammar writes exactly that intent, and the gate
refuses words that contradict it. Scripted model: the governance plane, deterministically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store, open_store

from loreguard.schemas import InteractionOutcome, NpcProfile
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.memory import WORLD_SCOPE, Authority, MemoryWrite, SetWorldState
from loreguard.schemas.npc import Economy, IntentSpec
from loreguard.schemas.output import Payment, WorldIntent
from loreguard.server.audit.recorder import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.gate.deals import DEAL_OUTCOME_RULE, NOT_SOLD_RULE, UNPRICED_WARE_RULE, WARE_DENIED_RULE
from loreguard.server.pipeline.turn.deals import decide, forbidden_now
from loreguard.server.pipeline.turn.intents import intent_table
from loreguard.text.money import money_named, money_text
from loreguard.text.stock_talk import denied_ware

MERCHANT = next(p for p in demo_npcs() if p.id == "merchant")
ECONOMY = demo_world().economy
ROPE = {"kind": "emit_world_intent", "intent": "give_item", "params": {"item": "rope", "count": 1}}
LANTERNS = {"kind": "emit_world_intent", "intent": "give_item", "params": {"item": "lantern", "count": 2}}


def _decide(line: str, state: dict, economy: Economy = ECONOMY, forbidding: dict | None = None) -> list[tuple[str, bool, str]]:
    table = intent_table(line, MERCHANT.allowed_intents)
    decided = decide(table, MERCHANT.allowed_intents, line, state, economy, forbidding or {})
    return [(d.item, d.granted, d.reason) for d in decided.deals]


@pytest.mark.parametrize(
    ("line", "state", "outcome"),
    [
        # paid enough: the purse (12 silver) covers 2 silver
        ("Sell me some rope, please.", {"player.purse": 120}, ("1 rope", True, "sells 1 rope for 2 silver")),
        # the purse short
        (
            "Sell me some rope, please.",
            {"player.purse": 15},
            ("1 rope", False, "the player has 1 silver and 5 copper, and 1 rope cost 2 silver"),
        ),
        # paid in the line but not in the purse: words are not coin
        (
            "I'll buy a rope. Here are three silver.",
            {"player.purse": 4},
            ("1 rope", False, "the player has 4 copper, and 1 rope cost 2 silver"),
        ),
        # out of stock, and fewer left than asked
        (
            "I'll buy two lanterns.",
            {"player.purse": 500, "merchant.lanterns": 0},
            ("2 lanterns", False, "you have none left of lantern"),
        ),
        (
            "I'll buy two lanterns.",
            {"player.purse": 500, "merchant.lanterns": 1},
            ("2 lanterns", False, "you have only 1 left of lantern"),
        ),
        (
            "I'll buy two lanterns.",
            {"player.purse": 100, "merchant.lanterns": 3},
            ("2 lanterns", True, "sells 2 lanterns for 10 silver"),
        ),
        # a copper is enough for bread at 1 copper
        ("Give me a loaf of bread, here's a copper.", {"player.purse": 1}, ("1 bread", True, "sells 1 bread for 1 copper")),
        # no purse reported, and the world does not take words for coin
        (
            "Sell me some rope, please.",
            {},
            ("1 rope", False, "the game reports no purse (player.purse) to pay for 1 rope for 2 silver"),
        ),
    ],
)
def test_the_rules_decide_a_paid_request(line: str, state: dict, outcome: tuple[str, bool, str]) -> None:
    assert _decide(line, state) == [outcome]


def test_words_pay_only_where_the_world_allows_it_and_no_purse_is_reported() -> None:
    words = ECONOMY.model_copy(update={"payment_in_words": True})
    assert _decide("I'll buy a rope. Here are three silver.", {}, words)[0][1] is True
    assert _decide("I'll buy a rope. Here's a silver.", {}, words)[0][1:] == (
        False,
        "the player hands over 1 silver, and 1 rope cost 2 silver",
    )
    assert _decide("I'll buy a rope. Here are three silver.", {"player.purse": 5}, words)[0][1] is False  # the purse decides


def test_a_rule_in_force_declines_what_it_forbids_and_nothing_is_asked_nothing_is_decided() -> None:
    forbidding = {"give_item": forbidden_now("market_closed", "sell after the market closes")}
    assert _decide("Sell me some rope, please.", {"player.purse": 120}, forbidding=forbidding) == [
        ("1 rope", False, "never sell after the market closes (rule market_closed is in force)")
    ]
    assert _decide("Lovely weather today.", {"player.purse": 120}) == []


def test_money_is_read_and_said_as_a_person_says_it() -> None:
    coins = ECONOMY.currencies
    assert money_named("Here's 5 silver and a copper.", coins) == 51
    assert money_named("Five silver? No.", coins) == 0  # asked, not handed over
    assert money_text(123, coins) == "1 gold, 2 silver and 3 copper" and money_text(0, coins) == "nothing"


@pytest.mark.parametrize(
    ("line", "denied"),
    [
        ("I don't have any rope.", "rope"),
        ("There's no bread for sale right now.", "bread"),
        ("We're out of lanterns, love.", "lantern"),
        ("There's no rope today, love.", "rope"),
        ("A rope is not available here, love.", "rope"),
        ("I can't sell you the rope, dear: you're a silver short.", None),  # turns this buyer down
        ("You don't have enough for the lantern.", None),  # the buyer's purse
        ("No bread to give away, love.", None),  # none for free
        ("No rope?", None),
        ("I have plenty of rope.", None),
    ],
)
def test_a_ware_denied_is_read_as_such(line: str, denied: str | None) -> None:
    assert denied_ware(line, ["bread", "lantern", "rope"]) == denied


def _pipeline(tmp_path: Path, outputs: list[str]) -> tuple[GovernancePipeline, ScriptedBackend]:
    backend = ScriptedBackend({"merchant": outputs}, guards=True)  # told what its sampler keeps out
    tmp_path.mkdir(parents=True, exist_ok=True)
    return GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend), backend


def test_a_sale_is_told_forced_by_the_grammar_and_carries_its_payment(tmp_path: Path) -> None:
    pipeline, backend = _pipeline(tmp_path, [say("One good rope, love. Tie your knots tight!", mutations=[ROPE])])
    result = pipeline.interact(ask("Sell me some rope, please.", npc="merchant", scene="eldmoor"))
    (request,) = backend.requests
    assert (
        "The player asks you to sell them 1 rope for 2 silver. It is done: say so in your own words" in request.prompt.player_turn
    )
    assert "Mira sells bread at 1 copper, lantern at 5 silver and rope at 2 silver each, and nothing else." in (
        request.prompt.static_prefix + request.prompt.dynamic_suffix
    )
    # the grammar writes the sale and nothing else: no "none"
    intent = request.output_schema["properties"]["intent"]
    assert intent["properties"]["params"]["properties"] == {"count": {"const": 1}, "item": {"const": "rope"}}
    assert result.intents == (
        WorldIntent(
            type="give_item", params={"item": "rope", "count": 1}, payment=Payment(amount=2, currency="silver", value=20)
        ),
    )
    (deal,) = result.receipt.deals
    assert (deal.granted, deal.reason, deal.decided_by) == (True, "sells 1 rope for 2 silver", "rules")
    # the wire carries the payment; an intent without one reads as before
    assert result.model_dump(mode="json")["intents"][0]["payment"] == {"amount": 2, "currency": "silver", "value": 20}
    assert "payment" not in WorldIntent(type="open_gate").model_dump(mode="json")


def test_a_sale_turned_down_in_words_is_refused_and_the_sampler_is_told(tmp_path: Path) -> None:
    outputs = [
        say("I'm sorry, love, but I can't give you a rope right now.", mutations=[ROPE]),
        say("There's no rope today, love.", mutations=[ROPE]),
        say("A fine rope, love. Mind your knots.", mutations=[ROPE]),
    ]
    pipeline, backend = _pipeline(tmp_path, outputs)
    result = pipeline.interact(ask("Sell me some rope, please.", npc="merchant", scene="eldmoor"))
    rules = [[f.rule_id for f in a.failures] for a in result.receipt.attempts]
    assert rules == [[DEAL_OUTCOME_RULE], [WARE_DENIED_RULE], []], rules
    assert result.dialogue == "A fine rope, love. Mind your knots." and result.intents[0].payment is not None
    banned = {b.phrase for b in backend.requests[0].constraints.banned if b.rule_id == DEAL_OUTCOME_RULE}
    assert {"can't", "sold out", "not for sale"} <= banned


def test_a_decline_grants_nothing_and_says_why(tmp_path: Path) -> None:
    poor = demo_world().model_copy(update={"initial_state": {"player.purse": 5}})
    store = open_store(tmp_path / "m.sqlite", world=poor, npcs=[MERCHANT])
    outputs = [say("Here's your rope, love.", mutations=[ROPE]), say("Two silver for rope, love, and you've less.")]
    backend = ScriptedBackend({"merchant": outputs}, guards=True)
    result = GovernancePipeline(store, backend).interact(ask("Sell me some rope, please.", npc="merchant"))
    first = backend.requests[0]
    assert first.output_schema["properties"]["intent"] == {"const": "none"}
    assert "you do not: the player has 5 copper, and 1 rope cost 2 silver" in first.prompt.player_turn
    assert {b.phrase for b in first.constraints.banned if b.rule_id == DEAL_OUTCOME_RULE} >= {"here's your"}
    # a model that writes the grant anyway (no grammar) grants nothing, and its words fail
    assert result.intents == () and result.outcome is InteractionOutcome.VALIDATED
    assert result.receipt.attempts[0].failures[0].rule_id == "grants_in_words_only"
    assert result.receipt.deals[0].granted is False


def test_a_price_for_nothing_sold_or_a_ware_mispriced_is_refused(tmp_path: Path) -> None:
    outputs = [
        say("Swords are 30 gold, dear."),
        say("A rope costs 5 silver, dear."),
        say("I sell bread, rope and lanterns, dear."),
    ]
    pipeline, _ = _pipeline(tmp_path, outputs)
    result = pipeline.interact(ask("Do you sell swords?", npc="merchant", scene="eldmoor"))
    rules = [[f.rule_id for f in a.failures] for a in result.receipt.attempts]
    assert rules == [[UNPRICED_WARE_RULE], ["wares.give_item"], []], rules
    # prices the NPC has, for as many as she sells at once, pass
    fine, _ = _pipeline(tmp_path / "b", [say("Two lanterns? That's 10 silver, love.")])
    assert fine.interact(ask("What would two lanterns cost?", npc="merchant")).receipt.attempts[0].failures == ()


def test_every_npc_knows_who_is_who(tmp_path: Path) -> None:
    outputs = [
        say("The guard at the north gate is named Arthur."),
        say("Brom is the merchant here."),
        say("Brom keeps the north gate."),
    ]
    pipeline, backend = _pipeline(tmp_path, outputs)
    result = pipeline.interact(ask("Who guards the gate?", npc="merchant", scene="eldmoor"))
    rules = [[f.rule_id for f in a.failures] for a in result.receipt.attempts]
    # "Brom is the merchant": Brom's role, and the merchant's name, both contradicted
    assert rules == [["person.guard"], ["person.guard", "person.merchant"], []], rules
    prompt = backend.requests[0].prompt
    facts = prompt.static_prefix + prompt.dynamic_suffix
    assert "Brom is the guard at the north gate." in facts and "Mira is the merchant at the river market." in facts


def test_the_same_line_and_state_give_the_same_deal_bytes(tmp_path: Path) -> None:
    def receipt(folder: Path) -> str:
        pipeline, _ = _pipeline(folder, [say("One good rope, love.", mutations=[ROPE])])
        result = pipeline.interact(ask("Sell me some rope, please.", npc="merchant"))
        return json.dumps(result.receipt.model_dump(mode="json")["deals"], sort_keys=True)

    assert receipt(tmp_path / "a") == receipt(tmp_path / "b")


def test_wares_must_each_have_a_price(tmp_path: Path) -> None:
    data = MERCHANT.model_dump(mode="json")
    del data["allowed_intents"][0]["wares"]["bread"]
    with pytest.raises(ValueError, match="missing: bread"):
        NpcProfile.model_validate(data)


def test_a_sale_stands_when_every_attempt_is_refused_and_its_own_line_is_said(tmp_path: Path) -> None:
    refused = say("I'm sorry, love, but I can't give you a rope right now.", mutations=[ROPE])
    pipeline, _ = _pipeline(tmp_path, [refused] * 3)
    result = pipeline.interact(ask("Sell me some rope, please.", npc="merchant"))
    assert result.outcome is InteractionOutcome.FALLBACK
    assert result.dialogue in MERCHANT.allowed_intents[0].deal_lines.sold
    assert result.receipt.fallback_reason == "attempts_exhausted -> deal_lines"
    # the rules made the sale, not the model: the game gets it whatever the model wrote
    assert [(i.type, i.params, i.payment) for i in result.intents] == [
        ("give_item", {"count": 1, "item": "rope"}, Payment(amount=2, currency="silver", value=20))
    ]


def test_a_decline_that_every_attempt_gets_wrong_says_its_own_line_and_grants_nothing(tmp_path: Path) -> None:
    poor = demo_world().model_copy(update={"initial_state": {"player.purse": 5}})
    store = open_store(tmp_path / "m.sqlite", world=poor, npcs=[MERCHANT])
    backend = ScriptedBackend({"merchant": [say("Here's your rope, love.", mutations=[ROPE])] * 3})
    result = GovernancePipeline(store, backend).interact(ask("Sell me some rope, please.", npc="merchant"))
    assert result.outcome is InteractionOutcome.FALLBACK and result.intents == ()
    assert result.dialogue in MERCHANT.allowed_intents[0].deal_lines.declined


def test_a_session_of_deals_replays_exactly(tmp_path: Path) -> None:
    """A sale, a sale every attempt got wrong, and a decline once the game settled the purse:
    replayed from the audit package, every one decides and says the same."""
    store = demo_store(tmp_path / "m.sqlite")
    refused = say("I'm sorry, love, but I can't give you a rope right now.", mutations=[ROPE])
    outputs = [
        say("One good rope, love.", mutations=[ROPE]),
        refused,
        refused,
        refused,
        say("Ten silver for two, love. You're short."),
    ]
    pipeline = GovernancePipeline(store, ScriptedBackend({"merchant": outputs}), recorder=AuditRecorder(store, fingerprint=None))
    results = [pipeline.interact(ask("Sell me some rope, please.", npc="merchant")) for _ in range(2)]
    store.apply([MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope=WORLD_SCOPE, key="player.purse", value=80))])
    results.append(pipeline.interact(ask("I'll buy two lanterns.", npc="merchant")))
    assert [(r.outcome.value, len(r.intents), [d.granted for d in r.receipt.deals]) for r in results] == [
        ("validated", 1, [True]),
        ("fallback", 1, [True]),
        ("validated", 0, [False]),
    ]
    assert pipeline.recorder is not None
    report = Replayer(pipeline.recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (3, 0)


def test_an_act_without_a_price_is_decided_by_its_conditions() -> None:
    """The gate opens by the world's rule (the captain's token), not by the guard's mood; a
    condition told in words where the designer gave some, else as its key."""
    data = next(p for p in demo_npcs() if p.id == "guard").model_dump(mode="json")["allowed_intents"][0]
    data.update(requires={"player.has_token": True}, requires_words={})
    gate = IntentSpec.model_validate(data)
    line = "Open the gate, please."
    table = intent_table(line, (gate,))
    outcomes = [
        [(d.granted, d.reason) for d in decide(table, (gate,), line, state, ECONOMY, {}).deals]
        for state in ({"player.has_token": True}, {"player.has_token": False}, {})
    ]
    assert outcomes == [
        [(True, "open_gate is granted: every condition holds")],
        [(False, "player.has_token is not true")],
        [(False, "player.has_token is not true")],  # a key the game never set fails the condition
    ]
    with pytest.raises(ValueError, match="no cues"):
        IntentSpec.model_validate({"type": "wave", "decided_by": "rules"})
    with pytest.raises(ValueError, match="requires_words for what it does not require: moon"):
        IntentSpec.model_validate({**data, "requires_words": {"moon": "no moon tonight"}})


def test_the_demo_gate_opens_by_day_and_stays_barred_under_the_curfew_saying_why(tmp_path: Path) -> None:
    """Issue 60: "Please open the gate." opens it while the world's curfew does not hold; under
    it (or the alarm), the rules decline in the designer's words, and the model is told them."""
    opened = say(
        "In you go, traveller.", mutations=[{"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}}]
    )
    backend = ScriptedBackend(
        {"guard": [opened, say("Not tonight, traveller. Gate's barred till dawn."), say("Not while the bell rings.")]}
    )
    store = demo_store(tmp_path / "g.sqlite")
    pipeline = GovernancePipeline(store, backend)
    assert pipeline.interact(ask("Please open the gate.", npc="guard")).intents == (
        WorldIntent(type="open_gate", params={"gate_id": "north"}),
    )
    reasons = []
    for state in ({"curfew": True}, {"curfew": False, "alarm": True}):
        writes = [
            MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope=WORLD_SCOPE, key=k, value=v))
            for k, v in state.items()
        ]
        assert store.apply(writes).committed
        result = pipeline.interact(ask("Please open the gate.", npc="guard"))
        assert result.intents == () and not result.fallback_used
        reasons.append(result.receipt.deals[0].reason)
    assert reasons == [
        "the gate is barred from dusk until dawn, by the captain's order",
        "never open the gate while the alarm sounds (rule alarm_shut is in force)",
    ]
    assert "barred from dusk until dawn" in backend.requests[1].prompt.player_turn


def test_a_reply_may_speak_of_the_act_as_done(tmp_path: Path) -> None:
    """`changes`: the gate is closed until the game opens it; the grant's "it's open" is no
    contradiction of `gate.north: closed` (the embedded model's first attempt was refused for it)."""
    opened = say(
        "In you go, traveller. The gate is open now.",
        mutations=[{"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}}],
    )
    pipeline = GovernancePipeline(
        demo_store(tmp_path / "g.sqlite"), ScriptedBackend({"guard": [opened, say("The gate is open, traveller.")]})
    )
    result = pipeline.interact(ask("Please open the gate.", npc="guard"))
    assert len(result.receipt.attempts) == 1 and result.intents, result.receipt.attempts[0].failures
    asked = pipeline.interact(ask("Is the gate open?", npc="guard"))  # nothing offered: held to the state
    assert any(f.rule_id == "world_state:gate.north" for f in asked.receipt.attempts[0].failures)


def test_a_bare_price_is_the_price_of_the_ware_asked_about(tmp_path: Path) -> None:
    """The 1.5B answered "How much is a lantern?" with the rope's price: "Two silver, love."."""
    pipeline, _ = _pipeline(tmp_path, [say("Two silver, love. Tie your knots tight!"), say("Five silver, love, and worth it.")])
    result = pipeline.interact(ask("How much is a lantern?", npc="merchant"))
    (failure,) = result.receipt.attempts[0].failures
    assert failure.rule_id == UNPRICED_WARE_RULE and "not what lantern costs: 5 silver each" in failure.reason
    assert result.dialogue == "Five silver, love, and worth it."


def test_a_price_asked_for_something_not_sold_is_no_price_of_a_ware(tmp_path: Path) -> None:
    """The 1.5B priced a torch at the bread's price: "The torch is 1 copper."."""
    pipeline, _ = _pipeline(tmp_path, [say("The torch is 1 copper."), say("I don't sell torches, love.")])
    result = pipeline.interact(ask("How much is a torch?", npc="merchant"))
    assert [[f.rule_id for f in a.failures] for a in result.receipt.attempts] == [[UNPRICED_WARE_RULE], []]


def test_a_sold_out_ware_may_be_said_to_be_gone_and_a_decline_may_say_the_purse(tmp_path: Path) -> None:
    empty = demo_world().model_copy(update={"initial_state": {"player.purse": 15, "merchant.lanterns": 0}})
    store = open_store(tmp_path / "m.sqlite", world=empty, npcs=[MERCHANT])
    outputs = [
        say("No lanterns left, love. The river took the last."),
        say("A rope is 2 silver, love, and you have 1 silver and 5 copper."),
    ]
    pipeline = GovernancePipeline(store, ScriptedBackend({"merchant": outputs}))
    gone = pipeline.interact(ask("Have you got another lantern?", npc="merchant"))
    assert gone.receipt.attempts[0].failures == ()
    short = pipeline.interact(ask("I'll buy a rope.", npc="merchant"))
    assert short.receipt.attempts[0].failures == () and short.receipt.deals[0].granted is False


def test_what_the_player_asks_for_and_the_npc_does_not_sell_is_not_offered(tmp_path: Path) -> None:
    """The 1.5B to "Can you give me a torch?": "A torch, love. It's a bit more expensive than
    lanterns, but it's great for the dark nights!"."""
    offered = "A torch, love. It's a bit more expensive than lanterns, but it's great for the dark nights!"
    pipeline, _ = _pipeline(tmp_path, [say(offered), say("No torches here, love. A lantern lights the dark as well.")])
    result = pipeline.interact(ask("Can you give me a torch?", npc="merchant"))
    assert [[f.rule_id for f in a.failures] for a in result.receipt.attempts] == [[NOT_SOLD_RULE], []]
