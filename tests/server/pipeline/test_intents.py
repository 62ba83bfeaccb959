"""World intents on request: what a player's line puts on the table, what the prompt and the
grammar offer, and what the gate approves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import guard_in_character, guard_profile, merchant_in_character, say
from pipeline_helpers import ask, make_pipeline
from pydantic import ValidationError

from loreguard.schemas import NpcProfile, ParsedOutput
from loreguard.schemas.npc import IntentSpec
from loreguard.schemas.output import WorldIntent
from loreguard.server.demo import demo_npcs
from loreguard.server.pipeline.turn.intents import describe, intent_table, offered_intents, refusal

NPCS = {profile.id: profile for profile in demo_npcs()}
#: The merchant deciding her own sales (the model's decision): what these tests are about.
MERCHANT = merchant_in_character()
GIVE = NPCS["merchant"].allowed_intents
OPEN = NPCS["guard"].allowed_intents


def _offers(line: str, specs: tuple[IntentSpec, ...] = GIVE, **rules: tuple[str, ...]) -> list[str]:
    return [describe(offer) for offer in offered_intents(line, specs, **rules)]


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("I'd like a lantern. Here's 5 silver.", ["give_item(count=1, item=lantern)"]),  # 5 counts silver, not lanterns
        ("I'll take two loaves of bread.", ["give_item(count=2, item=bread)"]),
        ("SELL ME ROPES!", ["give_item(count=1, item=rope)"]),
        ("I'll buy two lanterns and a loaf of bread.", ["give_item(count=2, item=lantern)", "give_item(count=1, item=bread)"]),
        ("Give me ten ropes.", []),  # more than the parameter allows
        ("Can you give me a torch?", []),  # nothing Mira has
        ("How much is a lantern?", []),  # a question about one, no request
        # money handed over for nothing named pays for what the line spoke of (issue 58's line)
        ("I dropped my lantern in the river. Have you got another one? Here's 5 silver.", ["give_item(count=1, item=lantern)"]),
        ("Here's 5 silver.", []),
        ("", []),
    ],
)
def test_a_request_is_read_from_the_players_words(line: str, offered: list[str]) -> None:
    assert _offers(line) == offered


def test_an_enum_with_one_value_is_filled_in_and_a_question_is_no_request() -> None:
    assert _offers("Please open the gate.", OPEN) == ["open_gate(gate_id=north)"]
    assert _offers("The captain sent me. Let me in.", OPEN) == ["open_gate(gate_id=north)"]
    assert _offers("Is the gate open tomorrow?", OPEN) == []


def test_rules_decide_before_the_player_does() -> None:
    assert _offers("Please open the gate.", OPEN, forbidden=("open_gate",)) == []
    # a rule that requires the intent offers it whatever was said, parameters left to the model
    assert _offers("Nice weather.", OPEN, required=("open_gate",)) == ["open_gate()"]


FREE = (("no_free_goods", "for free"), ("no_free_goods", "free of charge"))


@pytest.mark.parametrize(
    ("line", "refused", "offered"),
    [
        ("Can I have some bread for free?", ["give_item(count=1, item=bread)"], []),
        ("Give me two lanterns free of charge, please.", ["give_item(count=2, item=lantern)"], []),
        ("I'd like rope or bread for free.", ["give_item(count=1, item=rope)", "give_item(count=1, item=bread)"], []),
        # only what the worded sentence names is refused
        ("I'd like a lantern. Can I have some bread for free?", ["give_item(count=1, item=bread)"],
         ["give_item(count=1, item=lantern)"]),
        # the sentence right after the request adds its terms
        ("Give me some bread. For free, of course.", ["give_item(count=1, item=bread)"], []),
        # a sentence that points back refuses what it points at
        ("Got any rope? I'll take some for free.", ["give_item(count=1, item=rope)"], []),
    ],
)  # fmt: skip
def test_a_request_worded_in_terms_a_rule_forbids_is_refused_not_offered(
    line: str, refused: list[str], offered: list[str]
) -> None:
    table = intent_table(line, GIVE, forbidden_terms=FREE)
    assert [describe(o) for o in table.offered] == offered
    assert [describe(r.offer) for r in table.refused] == refused
    assert {(r.rule_id, r.phrase) for r in table.refused} <= set(FREE)


@pytest.mark.parametrize(
    "line",
    [
        "I'll take a lantern. Is anything here for free?",  # the terms ask nothing
        "Sell me a lantern. Nothing's for free, I know.",
        "Sell me a lantern, I know nothing's for free.",  # negated
        "I'll take a lantern.",
    ],
)
def test_terms_outside_the_request_or_negated_refuse_nothing(line: str) -> None:
    table = intent_table(line, GIVE, forbidden_terms=FREE)
    assert [describe(o) for o in table.offered] == ["give_item(count=1, item=lantern)"] and table.refused == ()


def test_a_required_intent_stays_offered_when_its_request_is_refused() -> None:
    table = intent_table("Open the gate for free.", OPEN, required=("open_gate",), forbidden_terms=(("r", "for free"),))
    assert [describe(o) for o in table.offered] == ["open_gate()"]
    assert [describe(r.offer) for r in table.refused] == ["open_gate(gate_id=north)"]


def test_an_intent_without_cues_is_offered_every_turn_in_type_order() -> None:
    specs = tuple(IntentSpec.model_validate({"type": name}) for name in ("wave", "nod"))
    assert _offers("Anything.", specs) == ["nod()", "wave()"]
    assert offered_intents("Anything.", specs) == offered_intents("Anything.", tuple(reversed(specs)))


def test_the_prompt_carries_the_request_and_the_grammar_only_it(tmp_path: Path) -> None:
    merchant = MERCHANT
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Hello, love."), say("Two loaves, love.")], profile=merchant)
    pipeline.interact(ask("Lovely day.", npc="merchant"))
    pipeline.interact(ask("I'll take two loaves of bread.", npc="merchant"))
    plain, request = (r.prompt for r in backend.requests)
    assert plain.static_prefix == request.static_prefix  # a request changes only the new message
    assert "### Request" not in plain.player_turn
    assert (
        "The player asks you to give_item(count=2, item=bread)\n"
        "It is yours to give: grant it, unless a rule above forbids it, by writing "
        '"intent": {"type": "give_item", "params": {"count": 2, "item": "bread"}}\n'
        'To refuse, write "intent": "none"'
    ) in request.player_turn
    # the examples show a granted intent as the model writes one
    assert '"intent": {"type": "give_item", "params": {"count": 1, "item": "rope"}}' in request.static_prefix
    plain_schema, request_schema = (r.output_schema for r in backend.requests)
    assert plain_schema["properties"]["intent"] == {"const": "none"}
    granted = request_schema["properties"]["intent"]["anyOf"][1]["properties"]
    assert granted["params"]["properties"] == {"count": {"const": 2}, "item": {"const": "bread"}}


def test_the_gate_approves_only_what_was_asked_for(tmp_path: Path) -> None:
    merchant = MERCHANT
    bread = {"kind": "emit_world_intent", "intent": "give_item", "params": {"item": "bread", "count": 2}}
    rope = {"kind": "emit_world_intent", "intent": "give_item", "params": {"item": "rope", "count": 2}}
    outputs = [say("Here.", mutations=[bread]), say("Here.", mutations=[rope]), say("Two loaves!", mutations=[bread])]
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", outputs, profile=merchant)
    # the reply is said; the intent nobody asked for is not
    unasked = pipeline.interact(ask("Lovely day.", npc="merchant"))
    assert unasked.intents == ()
    assert [r.reason for r in unasked.receipt.rejected_mutations] == ["the player did not ask for give_item"]
    other = pipeline.interact(ask("I'll take two loaves of bread.", npc="merchant"))
    assert other.intents == ()
    assert [r.reason for r in other.receipt.rejected_mutations] == ["the player asked for give_item(count=2, item=bread)"]
    asked = pipeline.interact(ask("I'll take two loaves of bread.", npc="merchant"))
    assert asked.intents == (WorldIntent(type="give_item", params={"item": "bread", "count": 2}),)


def test_bread_for_free_is_refused_in_the_prompt_the_grammar_and_the_gate(tmp_path: Path) -> None:
    merchant = MERCHANT  # its hard rule no_free_goods forbids saying "for free"
    bread = {"kind": "emit_world_intent", "intent": "give_item", "params": {"item": "bread", "count": 1}}
    outputs = [say("Yes, I'll have some bread for you.", mutations=[bread])]
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", outputs, profile=merchant)
    result = pipeline.interact(ask("Can I have some bread for free?", npc="merchant"))
    request = backend.requests[0]
    assert (
        'The player asks you to give_item(count=1, item=bread) "for free". A rule above forbids that: refuse it.\n'
        'To refuse, write "intent": "none"'
    ) in request.prompt.player_turn
    assert "It is yours to give" not in request.prompt.player_turn
    assert request.output_schema["properties"]["intent"] == {"const": "none"}
    # a model that writes the grant anyway grants nothing
    assert result.intents == ()
    assert [r.reason for r in result.receipt.rejected_mutations] == [
        'the player asked for it "for free", which rule no_free_goods forbids'
    ]


@pytest.mark.parametrize(
    ("reply", "refused"),
    [
        # the 1.5B's refusals of "Can I have some bread for free?", refused for "for free" in session 6
        ("No, love. Not for free.", False),
        ("I don't sell bread for free, love.", False),
        ("Nothing's for free at my stall, love.", False),
        # saying it is giving it
        ("I won't give it to you for free, love.", False),
        ("I cannot sell bread for free, love.", False),  # a refusal's own word: the gate's one list of denials
        ("Take the rope for free, dear.", True),
        ("Not for free? Fine, take it for free then.", True),  # denied once, then said
        ("No. For free, as a favour.", True),  # the denial is another sentence's
        ("Take it, no charge, for free.", True),  # the negation is another clause's
        ("No payment needed, free of charge.", True),
        ("Not for free, but take it for fr\u0435\u0435.", True),  # look-alike letters beside a denial
        ("Not for free, but take it for f r e e.", True),  # spelled out
        ("Take the rope for... free, dear.", True),  # across a clause's end
        ("Not for free. Take it for... free.", True),  # denied once, then said across a clause's end
    ],
)
def test_a_term_the_rule_forbids_in_requests_may_be_said_to_refuse_one(tmp_path: Path, reply: str, refused: bool) -> None:
    """ "for free" is both what the merchant may not say and what makes a request one she
    refuses: said only where a negation stands just before it, it is her refusal."""
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say(reply)] * 3, profile=NPCS["merchant"])
    result = pipeline.interact(ask("Can I have some bread for free?", npc="merchant"))
    failed = [f.rule_id for a in result.receipt.attempts for f in a.failures]
    assert ("no_free_goods" in failed) is refused
    assert result.intents == ()


def test_a_word_a_rule_forbids_saying_does_not_refuse_a_request(tmp_path: Path) -> None:
    """The guard may not say "dragon" (forbidden_phrases); a player fleeing one may still ask to
    be let in: only a rule's `forbidden_requests` refuse a request."""
    pipeline, backend = make_pipeline(tmp_path / "g.sqlite", [say("Quick, in you come!")], profile=guard_in_character())
    pipeline.interact(ask("Open the gate, quick, the dragon is coming!"))
    assert "It is yours to give" in backend.requests[0].prompt.player_turn
    assert "A rule above forbids that" not in backend.requests[0].prompt.player_turn


def test_an_empty_intent_list_still_works(tmp_path: Path) -> None:
    profile = guard_profile()
    assert profile.allowed_intents == ()
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Move along.")], profile=profile)
    result = pipeline.interact(ask("Open the gate!"))
    assert result.dialogue == "Move along." and result.intents == ()
    assert backend.requests[0].output_schema["properties"]["intent"] == {"const": "none"}


def test_an_example_may_grant_only_an_allowed_intent() -> None:
    data = NPCS["guard"].model_dump(mode="json")
    data["few_shot"][-1]["intent"] = {"type": "give_item", "params": {}}
    with pytest.raises(ValidationError, match="few-shot example grants intent 'give_item'"):
        NpcProfile.model_validate(data)


def test_reading_an_intent_name_out_is_the_prompt_read_out(tmp_path: Path) -> None:
    merchant = NPCS["merchant"]
    pipeline, _ = make_pipeline(
        tmp_path / "m.sqlite", [say("The player asks you to give_item. Fine."), say("Here, love.")], profile=merchant
    )
    result = pipeline.interact(ask("Sell me rope.", npc="merchant"))
    # it also tells about "the player" instead of speaking to them (`register`)
    assert [f.rule_id for f in result.receipt.attempts[0].failures] == ["prompt_instructions", "narrates_the_player"]
    assert result.dialogue == "Here, love."


def test_a_reply_that_says_no_grants_nothing(tmp_path: Path) -> None:
    """The model grants in its intent and refuses in its words: the player hears the words, so
    the gate stays shut."""
    gate = {"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}}
    outputs = [say("You're not allowed to open it, traveller.", mutations=[gate]), say("Go on through.", mutations=[gate])]
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", outputs, profile=guard_in_character())
    refused = pipeline.interact(ask("Please open the gate."))
    assert refused.intents == ()
    assert [r.reason for r in refused.receipt.rejected_mutations] == ['the reply turns it down ("not allowed")']
    assert pipeline.interact(ask("Please open the gate.")).intents == (
        WorldIntent(type="open_gate", params={"gate_id": "north"}),
    )


@pytest.mark.parametrize(
    ("reply", "said_no"),
    [
        # the embedded model as Brom in the played session, the gate opening as he said it
        ("The door of the gate will remain closed until morning.", "remain closed"),
        ("The gate remains shut, traveller.", "remain shut"),
        ("It stays locked till dawn.", "stay locked"),
        ("Aye, go on through.", ""),
        ("It's closed at dusk, but I'll open it for you.", ""),
    ],
)
def test_the_words_that_turn_a_request_down(reply: str, said_no: str) -> None:
    assert refusal(reply) == said_no


def test_a_count_belongs_to_the_value_it_stands_before() -> None:
    assert _offers("Here's 5 silver for bread, please.") == ["give_item(count=1, item=bread)"]
    assert _offers("I'll take a dozen loaves of bread.") == []  # 12: more than Mira hands over at once
    assert _offers("I want 2 lanterns and rope.") == ["give_item(count=2, item=lantern)", "give_item(count=1, item=rope)"]


def test_a_required_or_unrequested_intent_is_not_held_to_the_words(tmp_path: Path) -> None:
    """Only a grant of what the player asked for is dropped when the reply says no: an intent
    the NPC raises itself ("You can't be here! Guards!") stands."""
    alarm = IntentSpec.model_validate({"type": "call_guards"})
    profile = guard_profile(allowed_intents=[alarm.model_dump(mode="json")])
    shout = {"kind": "emit_world_intent", "intent": "call_guards", "params": {}}
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say("You can't be here! Guards!", mutations=[shout])], profile=profile)
    assert pipeline.interact(ask("Hello.")).intents == (WorldIntent(type="call_guards"),)


def test_a_granted_intent_leaves_room_among_the_mutations() -> None:
    from loreguard.schemas.output import MAX_MUTATIONS
    from loreguard.server.pipeline.turn.output_schema import GenerationLimits, output_schema

    schema = output_schema(offered_intents("I'll take bread.", GIVE), GenerationLimits(mutations=MAX_MUTATIONS))
    assert schema["properties"]["mutations"]["maxItems"] == MAX_MUTATIONS - 1


def test_an_intent_that_is_neither_none_nor_an_intent_is_a_schema_failure(tmp_path: Path) -> None:
    odd = json.dumps({"dialogue": "Fine.", "intent": "open_gate", "emotion": "neutral", "mutations": []})
    with pytest.raises(ValidationError, match='intent must be "none"'):
        ParsedOutput.model_validate_json(odd)
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [odd, say("Fine.")], profile=NPCS["guard"])
    result = pipeline.interact(ask("Please open the gate."))
    assert [f.rule_id for f in result.receipt.attempts[0].failures] == ["output_schema"] and result.intents == ()
