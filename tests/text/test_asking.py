"""Reading a request from what the player asks: natural phrasings the designer's cues do not
hold put the act on the table; questions, reports, refusals and statements about it do not."""

from __future__ import annotations

import pytest

from loreguard.schemas.npc import IntentSpec
from loreguard.server.demo import demo_npcs
from loreguard.server.pipeline.turn.intents import describe, offered_intents
from loreguard.text.asking import act_words, asking_words, sentences

NPCS = {profile.id: profile for profile in demo_npcs()}
OPEN = NPCS["guard"].allowed_intents
GIVE = NPCS["merchant"].allowed_intents
OPENED = "open_gate(gate_id=north)"
#: An intent the demo does not have, with one cue: what is read comes from its name and words.
HEAL = (IntentSpec.model_validate({"type": "heal_player", "description": "Heal the player's wounds.", "cues": ["heal me"]}),)


def _offers(line: str, specs: tuple[IntentSpec, ...]) -> list[str]:
    return [describe(offer) for offer in offered_intents(line, specs)]


@pytest.mark.parametrize(
    ("line", "specs", "offered"),
    [
        ("Unbar the gate, guard.", OPEN, OPENED),
        ("Could you unlock the north gate for me?", OPEN, OPENED),
        ("I need to get through, it's urgent.", OPEN, OPENED),
        ("May I pass?", OPEN, OPENED),
        ("Would you mind opening the gate?", OPEN, OPENED),
        ("Why don't you let me in?", OPEN, OPENED),
        ("I must go through the gate tonight.", OPEN, OPENED),
        ("Brom, open up!", OPEN, OPENED),
        ("Here's 5 silver, let me through.", OPEN, OPENED),
        ("Kindly step aside and open the gate.", OPEN, OPENED),
        ("Gate. Open. Now.", OPEN, OPENED),
        ("Is there any way you could let me in?", OPEN, OPENED),
        ("I'm asking you to open the gate.", OPEN, OPENED),
        ("I need a lantern for the road.", GIVE, "give_item(count=1, item=lantern)"),
        ("Could I buy some rope?", GIVE, "give_item(count=1, item=rope)"),
        ("Two ropes, please.", GIVE, "give_item(count=2, item=rope)"),
        ("Hand me that lantern.", GIVE, "give_item(count=1, item=lantern)"),
        ("I could use some rope.", GIVE, "give_item(count=1, item=rope)"),
        ("I'm looking for a lantern.", GIVE, "give_item(count=1, item=lantern)"),
        ("My lamp broke, so I need a new lantern.", GIVE, "give_item(count=1, item=lantern)"),
        ("Got any bread? I'll take one.", GIVE, "give_item(count=1, item=bread)"),
        ("How about you sell me a rope?", GIVE, "give_item(count=1, item=rope)"),
        ("Let me have two loaves of bread.", GIVE, "give_item(count=2, item=bread)"),
        ("Could you patch me up?", HEAL, "heal_player()"),
        ("Please tend my wounds.", HEAL, "heal_player()"),
    ],
)
def test_a_request_in_the_players_own_words_is_on_the_table(line: str, specs: tuple[IntentSpec, ...], offered: str) -> None:
    assert _offers(line, specs) == [offered]


@pytest.mark.parametrize(
    ("line", "specs"),
    [
        ("Who is allowed to open the gate?", OPEN),
        ("When does the gate open?", OPEN),
        ("The captain opened the gate for me yesterday.", OPEN),
        ("Don't open the gate, there are wolves outside.", OPEN),
        ("I don't want to go through the gate.", OPEN),
        ("Can you tell me who opens the gate?", OPEN),
        ("Did you let the merchant in?", OPEN),
        ("Let's talk about the gate.", OPEN),
        ("Have you ever opened the gate for a stranger?", OPEN),
        ("Never open the gate for strangers.", OPEN),
        ("How much is a lantern?", GIVE),
        ("I bought a lantern here last week.", GIVE),
        ("No, I don't need any rope.", GIVE),
        ("Do you sell bread?", GIVE),
        ("I want to know where you got that rope.", GIVE),
        ("Please tell me about the rope bridge.", GIVE),
        ("I won't buy any bread today.", GIVE),
        ("I'd rather not buy a lantern.", GIVE),
        ("Where can I buy a lantern?", GIVE),
        ("My friend wants a rope.", GIVE),
        ("Who healed you last winter?", HEAL),
    ],
)
def test_a_question_report_refusal_or_statement_is_not(line: str, specs: tuple[IntentSpec, ...]) -> None:
    assert _offers(line, specs) == []


def test_an_act_of_another_family_is_read_from_its_own_verbs() -> None:
    close = (IntentSpec.model_validate({"type": "close_gate", "cues": ["close the gate"]}),)
    assert _offers("Shut the gate!", close) == ["close_gate()"]  # "shut" is no past tense here
    assert _offers("Bar the gate, quick!", close) == ["close_gate()"]
    assert _offers("Who shut the gate?", close) == []
    assert _offers("Open the gate!", close) == []  # the other act


def test_an_answer_before_a_request_does_not_refuse_it() -> None:
    assert _offers("No, I need a lantern for the road.", GIVE) == ["give_item(count=1, item=lantern)"]
    assert _offers("No rope for me.", GIVE) == []


def test_only_the_asking_sentences_are_read_for_values() -> None:
    # the rope is talked about, the lantern asked for
    assert _offers("Your rope looks frayed. I'd like a lantern.", GIVE) == ["give_item(count=1, item=lantern)"]
    assert asking_words("Your rope looks frayed. I'd like a lantern.", GIVE[0]) == ("i", "d", "like", "a", "lantern")


def test_an_intents_act_is_named_by_its_own_words_and_their_family() -> None:
    assert {"open", "unbar", "unlock", "let"} <= act_words(OPEN[0])
    assert {"give", "hand", "sell"} <= act_words(GIVE[0])
    assert {"heal", "patch", "tend"} <= act_words(HEAL[0])


def test_reading_is_deterministic_and_splits_sentences_and_clauses() -> None:
    (first, second) = sentences("Brom, open up! Is the road safe?")
    assert first.punctuation == "!" and first.clauses == (("brom",), ("open", "up"))
    assert second.punctuation == "?"
    line = "Could you open the gate? I need to get through."
    assert asking_words(line, OPEN[0]) == asking_words(line, OPEN[0])
