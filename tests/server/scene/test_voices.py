"""A scene's line that speaks for someone else fails the gate; the scene's situation is words."""

from __future__ import annotations

import pytest

from loreguard.schemas.interaction import SceneMember, SceneTurn
from loreguard.server.pipeline.prompt import SCENE_INSTRUCTION, scene_situation
from loreguard.server.pipeline.voices import SPEAKS_FOR_OTHERS_RULE, SPEAKS_TO_ITSELF_RULE, find_other_voices

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


def test_outside_a_scene_nothing_is_checked() -> None:
    assert find_other_voices('Aye. Mira: "What?"', None, "Brom") == []


def test_the_situation_names_who_is_there_where_and_what_about() -> None:
    turn = TURN.model_copy(update={"topic": "the late smith"})
    assert scene_situation(turn, "north_gate") == (
        f"Situation: you are talking with Mira the merchant and the player at north gate.\nTopic: the late smith\n{SCENE_INSTRUCTION}"
    )
    alone = SceneTurn(scene_id="gate", line=1)
    assert scene_situation(alone).startswith("Situation: you are talking with nobody.")
