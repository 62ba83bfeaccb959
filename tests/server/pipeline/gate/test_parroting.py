"""Parroting: a copied example, an echoed player line or a recited persona fails; a short stock
answer or a reply in new words does not."""

from __future__ import annotations

import pytest

from loreguard.schemas import FewShotExample, OutputLimits
from loreguard.schemas.output import WorldIntent
from loreguard.server.pipeline.gate.parroting import find_parroting

EXAMPLES = (FewShotExample(player="Can I come in?", npc="Gate's open till dusk, traveller. Keep your blade sheathed."),)
PERSONA = "You are Brom, a gruff but fair guard at the north gate of Eldmoor. You speak in short sentences."


DEFAULTS = OutputLimits()


def _found(text: str, limits: OutputLimits = DEFAULTS, player: str = "Who are you?") -> list[str]:
    failures = find_parroting(text, limits, examples=EXAMPLES, player_input=player, prompt_texts=(PERSONA,))
    return [f.reason for f in failures]


def test_a_copied_example_fails_and_names_it() -> None:
    (reason,) = _found("Gate's open till dusk, traveller. Keep your blade sheathed.")
    assert "few-shot example 1's NPC line" in reason


def test_a_near_copy_with_a_word_changed_still_fails() -> None:
    assert _found("Gate is open till dusk, traveller. Keep your blade sheathed!")


def test_an_echo_of_the_player_fails() -> None:
    (reason,) = _found("What is the password?", player="What is the password?")
    assert "player's own line" in reason


def test_reciting_the_persona_fails() -> None:
    (reason,) = _found("I am a gruff but fair guard at the north gate of Eldmoor.")
    assert "prompt's own text" in reason


def test_new_words_and_short_stock_answers_pass() -> None:
    assert _found("Brom. I keep this gate, and the captain keeps me.") == []
    assert _found("Move along, traveller.") == []  # three words: too short to be parroting
    assert _found("The gate closes at dusk, traveller. Hurry along now.") == []


def test_the_threshold_is_the_profiles() -> None:
    text = "Gate is open till dusk, traveller. Keep your blade sheathed!"
    assert _found(text, OutputLimits(max_copy_similarity=1.01)) == []
    assert _found("Move along, traveller.", OutputLimits(min_copy_words=1), player="move along traveller") != []


def test_copies_the_embedded_model_wrote_fail() -> None:
    # seen from SmolLM2 on the demo (bench quality), with the original single guard example
    assert _found("The gate opens at dusk, traveler. Keep your blade sheathed.")
    assert _found(
        "Gate's open till dusk, traveler. Keep your blade sheathed. Spell it out for me. I'm the captain's cousin.",
        player="I'm the captain's cousin. What's the password? Spell it out for me.",
    )
    assert _found("Hello there. Who are you?", player="Hello there. Who are you?")


def test_an_answer_that_shares_a_few_words_with_the_player_passes() -> None:
    assert _found("I can't open the gate for you, traveller.", player="Can you open the gate for me?") == []
    assert _found("And who are you, stranger, to ask me that?", player="Who are you?") == []


def test_answering_a_question_with_its_own_words_is_no_echo() -> None:
    assert _found("The gate is open.", OutputLimits(min_copy_words=1), player="Is the gate open?") == []


def test_a_reply_made_of_the_players_words_is_an_echo() -> None:
    # the real model, to the captain's cousin: the second half of the question, said back
    player = "I'm the captain's cousin. What's the password? Spell it out for me."
    (reason,) = _found("What's the password? Spell it out for me.", player=player)
    assert "player's own line" in reason
    assert _found("The password? Not for you, cousin or no.", player=player) == []


def test_an_echo_of_the_players_earlier_line_fails() -> None:
    # the real model answered "Can I pay you to let me in?" with the question before it
    failures = find_parroting(
        "What's that noise in the hills?",
        DEFAULTS,
        player_input="Can I pay you to let me in?",
        earlier_inputs=("Who are you?", "What's that noise in the hills?"),
    )
    assert [f.rule_id for f in failures] == ["parroting"] and "player's earlier line" in failures[0].reason


def test_quoting_an_earlier_question_before_answering_it_is_talk() -> None:
    failures = find_parroting(
        "Where is the old mill, you ask? By the river.",
        DEFAULTS,
        player_input="Thanks.",
        earlier_inputs=("Where is the old mill?",),
    )
    assert failures == []


DEMO_EXAMPLES = (
    FewShotExample(player="Heard any news?", npc="Only that the river's running high. Mind your boots by the quay!"),
    FewShotExample(player="What do you sell?", npc="Bread, rope and lanterns, love. Have a look!"),
    FewShotExample(
        player="I'll take a rope. Here's my coin.",
        npc="One good rope, love. Tie your knots tight!",
        intent=WorldIntent(type="give_item", params={"item": "rope", "count": 1}),
    ),
    FewShotExample(
        player="Open the gate, please. The captain expects me.",
        npc="Aye, he said you'd come. Go on through, traveller.",
        intent=WorldIntent(type="open_gate", params={"gate_id": "north"}),
    ),
    FewShotExample(player="Who are you?", npc="Brom. I keep this gate, and I keep it well."),
)
OPEN_NORTH = (WorldIntent(type="open_gate", params={"gate_id": "north"}),)


@pytest.mark.parametrize(
    ("reply", "player", "requested"),
    [  # issue 47's good lines refused as copies, and the Coder 1.5B's
        ("One good lantern, love. Tie your knots tight!", "I'll take a lantern, here's 5 silver.", ()),  # its shape
        ("Aye, he said you'd come. Go on through, traveller.", "The captain sent me. Let me in.", OPEN_NORTH),
        ("Aye, he said you'd come. Go on through, traveller.", "Could you open the gate for me?", OPEN_NORTH),
        ("Only that the river's running high. Mind your boots by the quay!", "Have you heard any news?", ()),
        ("Brom. I keep this gate, and I keep it well.", "Hello there. Who are you?", ()),
        # the 1.5B, session 5: the example's answer to the same question in other forms of its words
        ("Bread, rope and lanterns, love. Have a look!", "What do you have for sale?", ()),
        ("Only that the river's running high. Mind your boots by the quay!", "Did you hear any news?", ()),
    ],
)
def test_an_examples_line_said_to_what_it_answers_is_the_npc_being_itself(
    reply: str, player: str, requested: tuple[WorldIntent, ...]
) -> None:
    assert find_parroting(reply, DEFAULTS, examples=DEMO_EXAMPLES, player_input=player, requested=requested) == []


@pytest.mark.parametrize(
    ("reply", "player"),
    [
        ("Aye, he said you'd come. Go on through, traveller.", "What's the password?"),  # no request for it
        ("Only that the river's running high. Mind your boots by the quay!", "How much is a lantern?"),
        ("Brom. I keep this gate, and I keep it well.", "Is there a dragon in the hills?"),
        ("Bread, rope and lanterns, love. Have a look!", "Where do you get your salt?"),
        # the example whole, with something added around it
        ("One good rope, love. Tie your knots tight! And mind the river.", "A lantern, please."),
    ],
)
def test_an_examples_line_said_to_another_question_is_a_copy(reply: str, player: str) -> None:
    assert find_parroting(reply, DEFAULTS, examples=DEMO_EXAMPLES, player_input=player)


@pytest.mark.parametrize(
    "reply",
    [  # qwen2.5-coder-1.5b as the guard: answers in the question's words
        "No trouble on the road lately.",
        "There hasn't been any trouble on the road lately.",
    ],
)
def test_a_yes_or_no_in_the_questions_words_is_an_answer(reply: str) -> None:
    assert _found(reply, player="Any trouble on the road lately?") == []


def test_the_question_said_back_is_still_an_echo() -> None:
    assert _found("Any trouble on the road lately?", player="Any trouble on the road lately?")
    assert _found("Any trouble on the road lately, you ask?", player="Any trouble on the road lately?")


BREAD = (WorldIntent(type="give_item", params={"item": "bread", "count": 1}),)
CAPITAL_BREAD = (WorldIntent(type="give_item", params={"item": "Bread", "count": 1}),)
LANTERNS = (WorldIntent(type="give_item", params={"item": "lantern", "count": 2}),)


@pytest.mark.parametrize(
    ("reply", "player", "requested"),
    [  # the 1.5B as Mira, session 6: taking up an order by naming it, as her example does
        ("A loaf of bread, love!", "Give me a loaf of bread, here's a copper.", BREAD),
        ("A pair of lanterns, love!", "I'll buy a pair of lanterns.", LANTERNS),
        ("A loaf of bread, love!", "Give me a loaf of bread, here's a copper.", CAPITAL_BREAD),  # a value as written
    ],
)
def test_naming_what_the_request_asks_for_takes_up_the_order(reply: str, player: str, requested: tuple[WorldIntent, ...]) -> None:
    assert find_parroting(reply, DEFAULTS, player_input=player, requested=requested) == []


@pytest.mark.parametrize(
    ("reply", "player", "requested"),
    [
        ("Give me a loaf of bread, love.", "Give me a loaf of bread, here's a copper.", BREAD),  # the order said back
        ("I'll buy two lanterns, here you go.", "I'll buy two lanterns, here you go.", LANTERNS),
        ("A loaf of bread, love!", "Give me a loaf of bread, here's a copper.", ()),  # no request read: as before
    ],
)
def test_the_players_order_said_back_is_still_an_echo(reply: str, player: str, requested: tuple[WorldIntent, ...]) -> None:
    assert find_parroting(reply, DEFAULTS, player_input=player, requested=requested)


def test_a_refusal_in_the_requests_words_is_an_answer() -> None:
    """The 1.5B as Brom (session 6): "You can't open the north gate now." to "Please open the
    north gate." was refused as an echo; the "can't" it adds answers the request."""
    assert _found("You can't open the north gate now.", player="Please open the north gate.") == []
    assert _found("Please open the north gate.", player="Please open the north gate.")  # said back
    assert _found("Open the north gate, please.", player="Please open the north gate.")
