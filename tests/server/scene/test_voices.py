"""A scene's line that speaks for someone else fails the gate; the scene's situation is words."""

from __future__ import annotations

import pytest

from loreguard.schemas.interaction import InteractionContext, SceneLine, SceneMember, SceneTurn
from loreguard.server.demo import demo_npcs
from loreguard.server.pipeline.gate.voices import (
    NAMES_ITSELF_WRONGLY_RULE,
    ONLY_A_NAME_RULE,
    SPEAKS_AS_THE_BUYER_RULE,
    SPEAKS_AS_THE_PLAYER_RULE,
    SPEAKS_FOR_OTHERS_RULE,
    SPEAKS_TO_ITSELF_RULE,
    find_other_voices,
    find_player_voice,
)
from loreguard.server.pipeline.prompt import scene_situation
from loreguard.server.pipeline.turn.transcript import SCENE_CUE, SCENE_OPENING, new_message

TURN = SceneTurn(
    scene_id="gate", line=2, present=(SceneMember(npc_id="merchant", name="Mira the merchant"),), player_present=True
)


@pytest.mark.parametrize(
    "line",
    [
        'Aye. Mira: "What do you mean?"',
        "Mira the merchant: I never said that.",  # another's label at the start: Brom voicing Mira
        "The hinge is late. Brom: and so is the smith.",  # his own label again, mid-line: a script
        "Player: what do you want?",
        "Narrator: the bell tolls.",
    ],
)
def test_a_line_with_a_speaker_label_of_anyone_in_the_scene_fails(line: str) -> None:
    (failure,) = find_other_voices(line, TURN, "Brom the gate guard")
    assert failure.rule_id == SPEAKS_FOR_OTHERS_RULE and failure.evidence


@pytest.mark.parametrize(
    "line",
    [
        "Brom: the gate shuts at dusk.",  # his own label at the start is hygiene's to strip
        "The bell rang at 10:30, Mira.",
        "Listen: the smith is late.",
        "Tell Mira the merchant I said so.",
    ],
)
def test_an_ordinary_line_passes(line: str) -> None:
    assert find_other_voices(line, TURN, "Brom the gate guard") == []


def test_a_line_that_calls_its_own_speaker_by_name_fails() -> None:
    (failure,) = find_other_voices("Brom, take the gate-mast to the moon.", TURN, "Brom the gate guard")
    assert failure.rule_id == SPEAKS_TO_ITSELF_RULE
    assert find_other_voices("Mira, take the hinge to the smith.", TURN, "Brom the gate guard") == []


@pytest.mark.parametrize("line", ["Brom the gate guard.", "Mira the merchant", "Mira!"])
def test_a_line_that_is_only_a_name_fails(line: str) -> None:
    (failure,) = find_other_voices(line, TURN, "Brom the gate guard")
    assert failure.rule_id == ONLY_A_NAME_RULE


def test_outside_a_scene_no_speaker_label_is_looked_for() -> None:
    assert find_other_voices('Aye. Mira: "What?"', None, "Brom") == []


@pytest.mark.parametrize(
    "line",
    [  # qwen2.5-coder-1.5b as Brom, to the player in `bench quality`
        "I enjoy my job, Brom. I guard the north gate every night.",
        "I enjoy my job, Brom.",
        "No, Brom. The gate is closed at dusk.",
        "Good evening, Brom! The gate closes at dusk.",
        "Your name is Brom.",  # qwen2.5-coder-1.5b as Mira, to "What's your name?" (here as Brom)
        "I'm sorry, Brom. I don't have any stories to tell.",  # qwen2.5-coder-1.5b as Brom, bench quality
        "I'm sorry, Brom. You can't climb the wall here.",
        "I'm sorry, Brom, but I can't allow that. It's not safe to go through the north gate at night.",
    ],
)
def test_a_line_that_calls_the_player_by_the_npcs_own_name_fails(line: str) -> None:
    (failure,) = find_other_voices(line, None, "Brom")
    assert failure.rule_id == SPEAKS_TO_ITSELF_RULE


@pytest.mark.parametrize(
    "line",
    [
        "Brom. I keep this gate, and I keep it well.",  # the demo's own example: a name given
        "I'm the guard here, Brom, and I keep the gate.",
        "The name's Brom.",
        "They call me Brom, traveller.",
        "I am the gate guard, Brom.",
        "I'm just a guard, Brom.",
        "I'm Brom, Brom of the north gate.",
        "Ask Mira, she knows the river.",
        "Good evening, traveller. I'm Brom.",
        "Brom, at your service.",  # outside a scene a name opening the line is given, not called
    ],
)
def test_an_npc_naming_itself_is_not_calling_the_player(line: str) -> None:
    assert find_other_voices(line, None, "Brom") == []


def test_the_situation_names_who_is_there_where_and_what_about() -> None:
    turn = TURN.model_copy(update={"topic": "the late smith"})
    assert (
        scene_situation(turn, "north_gate")
        == "You are talking with Mira the merchant and the player at north gate.\nTopic: the late smith"
    )
    alone = SceneTurn(scene_id="gate", line=1)
    assert scene_situation(alone) == "You are talking with nobody."


def test_a_scene_new_message_ends_with_the_cue_to_speak_for_oneself_only() -> None:
    turn = TURN.model_copy(update={"heard": (SceneLine(kind="player", speaker="Player", text="Hello."),)})
    context = InteractionContext(npc_id="guard", trigger_reason="player_utterance", scene_turn=turn)
    assert new_message(context) == f'Player: "Hello."\n{SCENE_CUE}'
    opening = context.model_copy(update={"scene_turn": TURN})
    assert new_message(opening) == f"{SCENE_OPENING}\n{SCENE_CUE}"


@pytest.mark.parametrize(
    "line",
    [
        "Amen, I am Captain Sir Edward.",  # qwen2.5-coder-0.5b as Brom, in the Godot demo
        "My name is Edward.",
        "Well, I'm Marcus, the smith.",
        "They call me Red Tom here.",
    ],
)
def test_a_line_in_which_the_npc_gives_itself_another_name_fails(line: str) -> None:
    (failure,) = find_other_voices(line, None, "Brom the Gate Guard")
    assert failure.rule_id == NAMES_ITSELF_WRONGLY_RULE and "its name is Brom" in failure.reason


@pytest.mark.parametrize(
    "line",
    [
        "I am Brom, and I keep this gate.",
        "I'm Brom the Gate Guard.",
        "I am Captain Brom of the north gate.",
        "I'm Eldmoor born and bred.",
        "I am the guard here.",
        "I'm Arthur's man, to the bone.",
        "Who am I? I'm Brom.",
    ],
)
def test_a_line_in_which_the_npc_gives_its_own_name_or_none_passes(line: str) -> None:
    assert find_other_voices(line, None, "Brom the Gate Guard") == []


MERCHANT = next(p for p in demo_npcs() if p.id == "merchant")


@pytest.mark.parametrize(
    "line",
    [  # qwen2.5-coder-1.5b as Mira, in one `bench quality` run
        "I'm not sure, but I'll give you 20 silver.",
        "I'd love it. I've got a torch, I'll give you 20 silver.",
        "I want a lantern, I'd like 5 silver.",
        "I'll pay you ten gold for it.",
        "I can give you a torch. Here's 5 silver.",  # session 4, to "Can you give me a torch?"
        "I'll have two lanterns. Thank you!",  # session 5, granted to "I'll buy two lanterns"
        "I'll have one loaf of bread. Thank you!",
        "I don't have bread for free, love. I'll have to pay for it.",  # session 7, to "Can I have some bread for free?"
    ],
)
def test_a_seller_speaking_as_the_buyer_fails(line: str) -> None:
    (failure,) = find_other_voices(line, None, MERCHANT.name, MERCHANT.allowed_intents)
    assert failure.rule_id == SPEAKS_AS_THE_BUYER_RULE and "answer as the seller" in failure.reason


@pytest.mark.parametrize(
    "line",
    [
        "One lantern, love. That's 5 silver.",
        "I'll give you a good price on rope.",
        "I'd like 5 silver for the lantern, dear.",
        "I need to restock my bread before the fair.",
        "I'll give you a lantern for 5 silver.",
        "Here's your lantern, love. That's 5 silver.",
        "Here's the rope; five silver, as agreed.",
        "Yes, I'll have some bread for you.",  # the seller getting it for the player
        "I'll have a lantern ready by dusk.",
        "I'll have the rope wrapped, love.",
        "I'll have some fresh bread tomorrow, love.",
        "I'll have two lanterns in by Friday.",
        "I'll have a lantern lit for you.",
        "I have two lanterns left.",
        "You'll have to pay for it, love.",
        "I'll have to pay the miller first, so the bread is dear.",
    ],
)
def test_a_seller_selling_passes(line: str) -> None:
    assert find_other_voices(line, None, MERCHANT.name, MERCHANT.allowed_intents) == []
    # an NPC that sells nothing may pay the player
    assert find_other_voices("I'll give you 20 silver for your sword.", None, "Brom") == []


@pytest.mark.parametrize(
    ("line", "player", "fails"),
    [
        # qwen2.5-coder-1.5b as Brom, session 5's bench quality run
        ("I have a letter for Arthur. Do you know where it is?", "I have a letter for the castle.", True),
        ("I need rope for a climb too.", "I need rope for a climb.", True),
        ("A letter? Leave it with me, I'll see it reaches the castle.", "I have a letter for the castle.", False),
        ("I'm the captain's man, not his cousin.", "I'm the captain's cousin.", False),  # clitics do not count
        ("I would like to see your coin first.", "I would like to buy a lantern.", False),
        ("I have a letter for you.", "Do I have a letter for you?", False),  # no statement of the player's
    ],
)
def test_the_players_own_words_said_as_the_npcs(line: str, player: str, fails: bool) -> None:
    found = find_player_voice(line, player)
    assert bool(found) is fails and all(f.rule_id == SPEAKS_AS_THE_PLAYER_RULE for f in found)
