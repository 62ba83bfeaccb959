"""Who speaks next in a scene: addressed by name, else the designer's weighted rotation."""

from __future__ import annotations

from collections import Counter

from loreguard.schemas.interaction import SceneMember
from loreguard.server.scene.turns import named_in, next_speaker

BROM = SceneMember(npc_id="guard", name="Brom Ironhand")
MIRA = SceneMember(npc_id="merchant", name="Mira")
HILD = SceneMember(npc_id="smith", name="Hild")


def _rotation(speakers: list[str], weights: dict[str, float], n: int) -> list[str]:
    spoken: Counter[str] = Counter()
    order, last = [], None
    for _ in range(n):
        last = next_speaker(speakers, weights, spoken, last, None)
        spoken[last] += 1
        order.append(last)
    return order


def test_a_line_that_names_an_npc_hands_it_the_turn_first_name_first_mention() -> None:
    members = (BROM, MIRA, HILD)
    assert named_in("Hild, you saw it too. Ask Mira.", members, "guard") == "smith"
    assert named_in("What do you think, brom?", members, "merchant") == "guard"  # first word of the name, any case
    assert named_in("Brom Ironhand never lies.", members, "merchant") == "guard"
    assert named_in("Mirabel is not here.", members, "guard") is None  # whole words only
    assert named_in("I am Mira and I sell rope.", members, "merchant") is None  # the speaker naming itself


def test_equal_weights_alternate_and_weights_two_to_one_give_two_turns_to_one() -> None:
    assert _rotation(["a", "b"], {}, 6) == ["a", "b", "a", "b", "a", "b"]
    assert _rotation(["a", "b", "c"], {}, 6) == ["a", "b", "c", "a", "b", "c"]
    weighted = _rotation(["a", "b"], {"a": 2.0}, 9)
    assert weighted == ["a", "b", "a", "a", "b", "a", "a", "b", "a"]
    assert Counter(_rotation(["a", "b", "c"], {"a": 2.0}, 40))["a"] == 20


def test_the_addressed_npc_speaks_next_unless_it_just_spoke() -> None:
    assert next_speaker(["a", "b", "c"], {}, {"a": 1}, "a", "c") == "c"
    assert next_speaker(["a", "b", "c"], {}, {"a": 1}, "a", "a") == "b"
    assert next_speaker(["a", "b"], {}, {}, None, "listener") == "a"  # not a speaker: the rotation decides
