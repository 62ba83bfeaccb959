"""The claim checker (memory/claims.py): what the canonical gate flags in dialogue and what marks
a belief contradicted."""

from __future__ import annotations

import pytest

from loreguard.memory.claims import find_contradictions
from loreguard.schemas import CanonicalFact, Claim
from loreguard.schemas.memory import StateClaim

KING = CanonicalFact(
    id="king_name",
    text="The king is Arthur.",
    claims=(Claim(subject="king", attribute="name", value="Arthur", subject_aliases=("his majesty",), value_aliases=("Art",)),),
)
MILL = CanonicalFact(
    id="mill_location", text="The mill is in Oakvale.", claims=(Claim(subject="mill", attribute="location", value="Oakvale"),)
)


@pytest.mark.parametrize(
    ("text", "contradicts"),
    [
        ("The king is named Edward.", True),
        ("the KING is called edward!", True),
        ("The king's name is Edward.", True),
        ("His Majesty is named Edward the Bold.", True),
        ("The king is not named Arthur.", True),
        ("The king isn't named Arthur, you fool.", True),
        ("The king is named Arthur.", False),
        ("The king is called Art by his friends.", False),
        ("The king is not named Edward.", False),  # negating another value: consistent
        ("Edward? No. The king is named Arthur.", False),
        ("The queen is named Edwina.", False),
        ("The king likes bread.", False),
        ("The mill is in Riverford.", True),
        ("The mill is in Oakvale, by the bridge.", False),
        # a vouching adverb is not part of the value (the 1.5B's merchant, agreeing with canon)
        ("The king's name is indeed Arthur.", False),
        ("The king's name is truly Edward.", True),
        # a word of office between the name and its role (the 1.5B's merchant, agreeing with the player)
        ("Edward is the current king.", True),
        ("I believe you are correct, Edward is the rightful king.", True),
        ("Arthur is the current king.", False),
    ],
)
def test_claims(text: str, contradicts: bool) -> None:
    assert bool(find_contradictions(text, [KING, MILL])) is contradicts


def test_claims_beat_substring_negation() -> None:
    # Substring negation would flag "not ... Edward" (harmless) and miss "named Edward" (wrong).
    assert not find_contradictions("No, the king is not named Edward.", [KING])
    (hit,) = find_contradictions("Aye, the king is named Edward.", [KING])
    assert hit.asserted == "edward" and not hit.negated


GATE = StateClaim(
    subject="north gate",
    attribute="state",
    subject_aliases=("gate",),
    cues=("is", "is now", "stands", "was"),
    values={"closed": ("shut", "barred"), "open": ("opened", "unbarred")},
)


def gate_hits(text: str, value: str = "closed") -> list:
    return find_contradictions(text, [KING], [("gate.north", value), ("weather", "rain")], {"gate.north": GATE})


@pytest.mark.parametrize(
    ("text", "contradicts"),
    [
        ("The gate is open, go on through.", True),
        ("Aye, the north gate stands open.", True),
        ("The gate is now wide open.", True),  # a listed value a few words after the cue
        ("The gate is unbarred tonight.", True),  # another value's alias
        ("The gate is not closed.", True),  # the key's own value negated
        ("The gate is now not shut.", True),  # a negation between cue and value still counts
        ("The gate is closed, traveller.", False),
        ("The gate is shut till dawn.", False),  # an alias of the key's value
        ("The gate is not open.", False),  # another value negated: consistent
        ("The gate is that way.", False),  # after the cue stands no value the key takes
        ("The gate closes at dusk.", False),
        ("The weather is open to debate.", False),  # a key without a state claim is not checked
        ("Nice hat.", False),
    ],
)
def test_a_world_state_claim_is_checked_against_the_keys_value(text: str, contradicts: bool) -> None:
    assert bool(gate_hits(text)) is contradicts


def test_a_state_change_flips_the_verdict() -> None:
    assert gate_hits("The gate is open.") and not gate_hits("The gate is closed.")
    assert not gate_hits("The gate is open.", "open") and gate_hits("The gate is closed.", "open")


def test_a_state_contradiction_names_the_key_and_the_value_that_holds() -> None:
    (hit,) = gate_hits("Aye, the gate is open.")
    assert (hit.state_key, hit.fact_id, hit.label) == ("gate.north", "", "world_state:gate.north")
    assert (hit.canonical_value, hit.asserted, hit.negated) == ("closed", "open", False)
    (canonical,) = find_contradictions("The king is named Edward.", [KING], [("gate.north", "closed")], {"gate.north": GATE})
    assert canonical.label == "canonical:king_name" and canonical.state_key == ""


def test_state_claims_apply_only_to_the_keys_given() -> None:
    # The gate checks the keys the prompt carried: without the key, nothing is checked.
    assert not find_contradictions("The gate is open.", [], [], {"gate.north": GATE})
    assert not find_contradictions("The gate is open.", [], [("gate.north", "closed")], {})


def test_a_boolean_key_is_named_by_its_values_aliases() -> None:
    alarm = StateClaim(subject="alarm", attribute="state", cues=("is",), values={"true": ("ringing",), "false": ("silent",)})
    assert find_contradictions("The alarm is silent.", [], [("alarm", True)], {"alarm": alarm})
    assert not find_contradictions("The alarm is ringing!", [], [("alarm", True)], {"alarm": alarm})


def test_a_state_claim_without_values_reads_any_words_after_the_cue() -> None:
    loose = StateClaim(subject="weather", attribute="state", cues=("is",))
    assert find_contradictions("The weather is sunny.", [], [("weather", "rain")], {"weather": loose})
    assert not find_contradictions("The weather is rain, as ever.", [], [("weather", "rain")], {"weather": loose})


def test_a_state_claim_phrase_that_folds_to_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="no letter or digit"):
        StateClaim(subject="gate", attribute="state", values={"closed": ("!!",)})


HOURS = CanonicalFact(
    id="gate_hours",
    text="The north gate closes at dusk.",
    claims=(
        Claim(
            subject="gate",
            attribute="closing",
            value="dusk",
            cues=("closes at", "shuts at"),
            other_values=("midnight", "all night", "noon"),
        ),
    ),
)


@pytest.mark.parametrize(
    ("text", "contradicts"),
    [
        ("The north gate stays open all night.", True),  # issue 17's example: no cue at all
        ("The gates stay open till midnight.", True),  # the subject in the plural
        ("Our g\u0430te? Open all night, friend.", False),  # the question mark ends the clause before the value
        ("The g\u0430te stays open all night.", True),  # a Cyrillic а in the subject
        ("The gate never stays open all night.", False),  # negated: consistent
        ("Is the gate open all night?", False),  # a question asserts nothing
        ("If the gate stayed open all night, we'd be robbed.", False),  # a condition
        ("The gate closes at dusk, not midnight.", False),  # the holding value first
        ("The gate closes at midnight.", True),  # the cue path, as before
        ("Midnight is cold on the wall.", False),  # the value without the subject
        ("The gate is heavy, and the watch ends at midnight.", False),  # too far from the subject
    ],
)
def test_a_claim_is_contradicted_without_a_cue_by_a_known_other_value(text: str, contradicts: bool) -> None:
    assert bool(find_contradictions(text, [HOURS])) is contradicts


def test_a_state_value_without_a_cue_contradicts_the_key() -> None:
    (hit,) = gate_hits("The north gate? It stays wide open for you.".replace("?", ","))
    assert (hit.state_key, hit.asserted) == ("gate.north", "open")
    assert not gate_hits("The north gate stays shut tonight.")


@pytest.mark.parametrize("field", ["value", "subject", "cues", "other_values"])
def test_a_claim_phrase_that_normalises_to_nothing_is_refused(field: str) -> None:
    data = {"subject": "gate", "attribute": "closing", "value": "dusk"}
    data[field] = ("\u200b!",) if field in ("cues", "other_values") else "\u200b!"
    with pytest.raises(ValueError, match="no letter or digit") as refused:
        Claim.model_validate(data)
    assert refused.value.errors()[0]["loc"][0] == field  # type: ignore[attr-defined]


KING_ROLES = CanonicalFact(
    id="king",
    text="The king of Eldmoor is named Arthur.",
    claims=(
        Claim(
            subject="king",
            attribute="name",
            value="Arthur",
            subject_aliases=("his majesty",),
            role_cues=("rules", "reigns", "sits on the throne"),
        ),
    ),
)
RIVER = CanonicalFact(id="river", text="The river Ald.", claims=(Claim(subject="river", attribute="name", value="Ald"),))
EVERYDAY = [KING_ROLES, RIVER, HOURS]


@pytest.mark.parametrize(
    ("text", "asserted"),
    [
        # a negation anywhere in the clause of the canonical value
        ("The gate never closes. The captain forbids it.", "never closes"),
        ("The gate doesn't close, traveller.", "doesn't close"),
        ("The gate's closing is never closes, traveller.", "never closes"),  # qwen2.5-coder-1.5b
        ("It is not true that the king is named Arthur.", "arthur"),
        ("Arthur is not the king.", "arthur"),
        ("The king is not Arthur, whatever you heard.", "arthur"),
        # a copular or naming assertion of another value
        ("The king of Eldmoor is the captain's wife who only has a few children.", "the captain's wife"),
        ("The king is Bob.", "bob"),
        # the value ends where the next clause begins (the Godot demo's reason read "not sir valor and")
        ("The king is named Sir Valor and he rules well.", "sir valor"),
        ("The king's name is Sir Valor, and a fine one.", "sir valor"),
        ("The king has become Edward, not Edward.", "edward"),  # the real model's words
        ("Edward rules.", "edward"),
        ("Edward sits on the throne now.", "edward"),
        ("Edward is the king of Eldmoor.", "edward"),
        ("King Edward keeps the peace.", "edward"),
        ("The river Thames runs through town.", "thames"),
        # a name in apposition to the subject (qwen2.5-coder-0.5b: "Edward, king of Eldmoor!")
        ("Edward, king of Eldmoor! You are so nice and cheerful!", "edward"),
        ("The king, Edward, is kind.", "edward"),
        ("Thank you, Edward, the king.", "edward"),
    ],
)
def test_everyday_forms_of_a_contradiction_are_caught(text: str, asserted: str) -> None:
    (hit,) = find_contradictions(text, EVERYDAY)
    assert hit.asserted == asserted


@pytest.mark.parametrize(
    ("context", "text"),
    [
        ("Who is the king?", "His name is Bob."),
        ("Who is the king?", "He is Edward, and he is kind."),
        ("Does the gate ever close?", "It never closes."),
        ("", "The king? He's called Edward."),
        ("", "The gate? It never closes, not for anyone."),
    ],
)
def test_a_pronoun_finds_its_subject_in_the_reply_or_the_players_line(context: str, text: str) -> None:
    assert find_contradictions(text, EVERYDAY, context=context)


@pytest.mark.parametrize(
    ("context", "text"),
    [
        ("", "The king was never Edward. The king is Arthur, the brave one."),  # a wrong value denied
        ("", "Edward is not the king."),
        ("", "Edward? There's no King Edward here."),
        ("", "Is the king named Edward?"),  # a question
        ("", "If the king were Edward, we'd all be poorer."),  # a condition
        ("", "They say the king is Edward. Gossip."),  # a rumour the NPC does not vouch for
        ("", "I heard the gate never closes in the south."),
        ("", "It's not true that the gate never closes."),  # a denied denial
        ("", "The gate doesn't close until dusk."),  # the value follows the negated verb
        ("", "The gate closes at dusk and never closes for long."),  # the value that holds, said first
        ("", "The gate closes at dusk, and never closes again till then."),
        ("", "King Arthur rules us all."),
        ("", "The river Ald runs through town."),
        ("", "The king is a kind man, and old."),  # a description, not a name
        ("", "The king has become old and grey."),
        ("", "Brom is the king's man."),  # the king's, not the king
        ("", "Queen Edwina rules the south."),  # another title: another person
        ("", "The captain? He is Marcus."),  # the antecedent is the captain, not the king
        ("Who is the captain?", "He is Marcus."),
        ("What does the king like?", "He likes bread."),
        # ordinary lines a designer hit in review: none of them names the king otherwise
        ("", "Not true, the gate closes at dusk."),  # correcting the player
        ("", "That's a lie, the king is named Arthur."),
        ("", "Walk down the King's Road."),
        ("", "The king's Guard will stop you."),
        ("", "The king is King Arthur."),
        ("", "The king is Lord of all."),
        ("", "The king is OK."),
        ("", "The old king was Uther."),
        ("", "Marcus rules the guard with an iron fist."),
        ("", "The king is my father."),
        ("", "Edward, the king is Arthur."),  # speaks to Edward
        ("", "Hail, the king of Eldmoor!"),
        ("", "Arthur, king of Eldmoor, is kind."),
        ("", "The king, bless him, is Arthur."),
        ("", "Arthur, the king, is Edward's father."),
        ("", "The gate won't wait, it closes at dusk."),
        ("", "The gate never closes early."),
        ("", "The gate won't close on you."),
        ("The king sent me. Who are you?", "He is Edward, the smith."),
        ("Who is the king's wife?", "She is Marta, my wife."),
        ("", "The king has a son. He is Edward."),
    ],
)
def test_what_is_not_a_contradiction(context: str, text: str) -> None:
    assert not find_contradictions(text, EVERYDAY, context=context)


def test_part_of_the_canonical_name_is_the_name() -> None:
    long_name = CanonicalFact(
        id="king", text="King Arthur Pendragon.", claims=(Claim(subject="king", attribute="name", value="Arthur Pendragon"),)
    )
    for text in ("The king is Arthur.", "Long live King Arthur!", "King Arthur Pendragon rides out."):
        assert not find_contradictions(text, [long_name]), text
    assert find_contradictions("The king is Edward Pendragon.", [long_name])
