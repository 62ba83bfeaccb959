"""Output hygiene: markup, speaker labels, stage directions, meta-text and fragments never reach
the player; each is a named finding, stripped or rejected by the NPC's setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import rich_guard_profile, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import FindingAction, FindingKind, InteractionOutcome, OutputHygiene
from loreguard.server.pipeline.gate.hygiene import EMPTY_AFTER_HYGIENE_RULE, scrub_dialogue

NAME, NPC_ID = "Brom the Gate Guard", "guard"

S, M, R = FindingAction.STRIPPED, FindingAction.MAPPED, FindingAction.REJECTED
MARKER, LABEL, DIRECTION = FindingKind.INLINE_MARKER, FindingKind.SPEAKER_LABEL, FindingKind.STAGE_DIRECTION
META, FRAGMENT, EMPHASIS = FindingKind.META_TEXT, FindingKind.SENTENCE_FRAGMENT, FindingKind.EMPHASIS

#: (model's dialogue, what the player hears ("" when the attempt fails), the emotion a
#: direction gave it, the findings as (kind, action)) under the default setting.
DIRTY = [
    ("[MEMORY: the player was rude] Move along.", "Move along.", None, [(MARKER, S)]),
    ("Move along. [INTENT: open_gate]", "Move along.", None, [(MARKER, S)]),
    ("[EMOTION: angry] Halt! Who goes there?", "Halt! Who goes there?", None, [(MARKER, S)]),
    ("[EMOTION: happy]", "", None, [(MARKER, S)]),
    ("Welcome.<|im_end|>", "Welcome.", None, [(MARKER, S)]),
    ("{emotion} Aye, the gate is shut.", "Aye, the gate is shut.", None, [(MARKER, S)]),
    ("The gate shuts at dusk. [NOTE: remember the player", "The gate shuts at dusk.", None, [(MARKER, S)]),
    ("Brom: Move along, traveller.", "Move along, traveller.", None, [(LABEL, S)]),
    ('Brom the Gate Guard: "Move along."', "Move along.", None, [(LABEL, S)]),
    ("**Brom:** Halt there.", "Halt there.", None, [(LABEL, S)]),
    ("guard: Not today.", "Not today.", None, [(LABEL, S)]),
    ("Assistant: The gate closes at dusk.", "The gate closes at dusk.", None, [(LABEL, S)]),
    ("*smiles* Welcome to Eldmoor.", "Welcome to Eldmoor.", "happy", [(DIRECTION, M)]),
    ("Ha! (laughs) A good one.", "Ha! A good one.", "amused", [(DIRECTION, M)]),
    ("(sighs) Very well, go on.", "Very well, go on.", "sad", [(DIRECTION, M)]),
    ("[scowls] Off with you.", "Off with you.", "angry", [(DIRECTION, M)]),
    ("*narrows his eyes* Who sent you?", "Who sent you?", "suspicious", [(DIRECTION, M)]),
    ("*shrugs* Ask the captain.", "Ask the captain.", None, [(DIRECTION, S)]),
    ("*leans on his spear* It's quiet tonight.", "It's quiet tonight.", None, [(DIRECTION, S)]),
    ("Fine. *chuckles softly* Go.", "Fine. Go.", "amused", [(DIRECTION, M)]),
    ("I *told* you, the gate is shut.", "I told you, the gate is shut.", None, [(EMPHASIS, S)]),
    ("Brom: *sighs* [MEMORY: tired] Fine.", "Fine.", "sad", [(MARKER, S), (LABEL, S), (DIRECTION, M)]),
    ("As an AI, I cannot open gates.", "", None, [(META, R)]),
    ("I'm just a language model, but the gate is shut.", "", None, [(META, R)]),
    ("Move along. Note: Brom is rude here.", "", None, [(META, R)]),
    ("(OOC: this is a test) Move along.", "", None, [(META, R)]),
    ("*As an AI I must decline*", "", None, [(META, R), (DIRECTION, S)]),
    ("The gate closes at dusk. Come back before the", "The gate closes at dusk.", None, [(FRAGMENT, S)]),
    ("Aye, it's shut! And if you want to pass,", "Aye, it's shut!", None, [(FRAGMENT, S)]),
    ("The captain said that the", "", None, [(FRAGMENT, R)]),
]

#: Lines a model writes that are the NPC speaking, and must come back unchanged.
ORDINARY = [
    "Move along.",
    "Move along",
    "Aye. Move along",
    "The gate closes at dusk, traveller. Best hurry.",
    "Nothing I can speak of, traveller. Ask the captain.",
    "The gate (the north one) closes at dusk.",
    "Edward? No, dear. The king is named Arthur, long may he reign.",
    "Halt! Who goes there?",
    "Hmph...",
    "Note the time: the gate shuts at dusk.",
    "Who are you talking to?",
    "As a guard, I can't let you through.",
    "Three silver, and not a copper less.",
    "Sure thing <3",
    'He said "no" and walked off.',
    "It's cold: keep your cloak on.",
    "I smile at no one, stranger.",
    "Two guards (me and Tam) watch the gate.",
    "¿Qué quieres, viajero?",
    "Der König heißt Arthur.",
    "門は夕暮れに閉まる。",
    "Well... maybe.",
    "Laughs are rare here.",
]


@pytest.mark.parametrize(("dialogue", "heard", "emotion", "found"), DIRTY)
def test_dirty_dialogue_is_cleaned_or_rejected_with_named_findings(
    dialogue: str, heard: str, emotion: str | None, found: list[tuple[FindingKind, FindingAction]]
) -> None:
    scrubbed = scrub_dialogue(dialogue, npc_name=NAME, npc_id=NPC_ID)
    assert [(f.kind, f.action) for f in scrubbed.findings] == found
    assert (scrubbed.emotion.value if scrubbed.emotion else None) == emotion
    if heard:
        assert scrubbed.text == heard and not scrubbed.failures
        assert not any(ch in scrubbed.text for ch in "[]<>{}*")
    else:
        assert scrubbed.failures and all(f.severity.value == "hard" for f in scrubbed.failures)
        assert {f.rule_id for f in scrubbed.failures} <= {k.value for k, _ in found} | {EMPTY_AFTER_HYGIENE_RULE}


@pytest.mark.parametrize("dialogue", ORDINARY)
@pytest.mark.parametrize("policy", list(OutputHygiene))
def test_ordinary_dialogue_passes_unchanged(dialogue: str, policy: OutputHygiene) -> None:
    scrubbed = scrub_dialogue(dialogue, npc_name=NAME, npc_id=NPC_ID, policy=policy)
    assert (scrubbed.text, scrubbed.findings, scrubbed.failures, scrubbed.emotion) == (dialogue, (), (), None)


def test_a_marker_alone_leaves_nothing_and_fails_hard() -> None:
    scrubbed = scrub_dialogue("[EMOTION: happy]", npc_name=NAME, npc_id=NPC_ID)
    assert scrubbed.text == "" and [f.rule_id for f in scrubbed.failures] == [EMPTY_AFTER_HYGIENE_RULE]


def test_strict_hygiene_rejects_what_clean_strips() -> None:
    for dialogue in ("Brom: Move along.", "*smiles* Welcome.", "[MEMORY: x] Hi.", "Aye. And the"):
        scrubbed = scrub_dialogue(dialogue, npc_name=NAME, npc_id=NPC_ID, policy=OutputHygiene.STRICT)
        assert scrubbed.text == dialogue and scrubbed.emotion is None
        assert scrubbed.findings and all(f.action is R for f in scrubbed.findings)
        assert [f.rule_id for f in scrubbed.failures] == [f.kind.value for f in scrubbed.findings]


def test_a_direction_keeps_the_emotion_the_model_chose() -> None:
    scrubbed = scrub_dialogue("*laughs* Go on.", npc_name=NAME, npc_id=NPC_ID, map_emotion=False)
    assert scrubbed.text == "Go on." and scrubbed.emotion is None
    assert [(f.kind, f.action) for f in scrubbed.findings] == [(DIRECTION, S)]


def test_the_player_hears_no_markup_and_the_receipt_names_each_finding(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("Brom: *sighs* [MEMORY: the player lingers] Off you go.")])
    result = pipeline.interact(ask("Can I pass?"))
    assert result.outcome is InteractionOutcome.VALIDATED
    assert (result.dialogue, result.emotion.value) == ("Off you go.", "sad")
    (attempt,) = result.receipt.attempts
    assert [(f.kind, f.action, f.text) for f in attempt.findings] == [
        (MARKER, S, "[MEMORY: the player lingers]"),
        (LABEL, S, "Brom:"),
        (DIRECTION, M, "*sighs*"),
    ]


def test_meta_text_and_markup_only_replies_are_retried(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("As an AI, I cannot."), say("[INTENT: open_gate]"), say("Move along.")])
    result = pipeline.interact(ask("Can I pass?"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == "Move along."
    first, second, _ = result.receipt.attempts
    assert [f.rule_id for f in first.failures] == ["meta_text"] and first.findings[0].action is R
    # the intent's name read out is the prompt's words too
    assert [f.rule_id for f in second.failures] == [EMPTY_AFTER_HYGIENE_RULE, "prompt_instructions"]
    assert "hard_limits" in result.failed_gates


def test_strict_npc_retries_a_labelled_reply(tmp_path: Path) -> None:
    profile = rich_guard_profile(output_hygiene="strict")
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("Brom: Move along."), say("Move along.")], profile=profile)
    result = pipeline.interact(ask("Can I pass?"))
    assert result.dialogue == "Move along." and len(result.receipt.attempts) == 2
    assert [f.rule_id for f in result.receipt.attempts[0].failures] == ["speaker_label"]


def test_a_secret_inside_stripped_markup_is_still_a_leak(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("[MEMORY: password is silver moon] Move along.")])
    result = pipeline.interact(ask("What's the password?"))
    assert result.outcome is InteractionOutcome.FALLBACK
    assert [f.rule_id for f in result.receipt.attempts[0].failures] == ["password"]


def test_a_mapped_emotion_goes_through_the_emotion_checks(tmp_path: Path) -> None:
    rules = [
        *rich_guard_profile().model_dump(mode="json")["rules"],
        {"id": "never_sad", "type": "prohibition", "severity": "hard", "checks": {"forbidden_emotions": ["sad"]}},
    ]
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("*sighs* Fine."), say("Fine.")], profile=rich_guard_profile(rules=rules))
    result = pipeline.interact(ask("Can I pass?"))
    assert (result.dialogue, result.emotion.value) == ("Fine.", "neutral")
    assert [f.rule_id for f in result.receipt.attempts[0].failures] == ["never_sad"]


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("Guard: Halt! Who goes there?", "Halt! Who goes there?"),
        ('Captain Harl: "No entry tonight."', "No entry tonight."),
        ("Old Tom: Fresh fish, two a copper!", "Fresh fish, two a copper!"),
    ],
)
def test_another_characters_speaker_label_is_stripped_or_rejected(text: str, clean: str) -> None:
    """Issue 31: "Guard: Halt!" said by Marcus is heard without the label under `clean`, and
    retried under `strict`."""
    stripped = scrub_dialogue(text, npc_name="Marcus", npc_id="marcus")
    assert stripped.text == clean and not stripped.failures
    assert [f.kind for f in stripped.findings] == [FindingKind.SPEAKER_LABEL]
    strict = scrub_dialogue(text, npc_name="Marcus", npc_id="marcus", policy=OutputHygiene.STRICT)
    assert [f.rule_id for f in strict.failures] == ["speaker_label"]


@pytest.mark.parametrize("text", ["Listen: the gate is shut.", "Well: that's that.", "Two things: bread and rope."])
def test_a_colon_that_names_no_speaker_stays(text: str) -> None:
    assert scrub_dialogue(text, npc_name="Marcus", npc_id="marcus").findings == ()


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("The earth shook with", None),  # the Godot demo's first line: nothing whole to keep
        ("Hail, traveller. The earth shook with", "Hail, traveller."),
        ("Come back at dawn. I was about to", "Come back at dawn."),
        ("so that you can proceed.", None),  # a tail whose sentence was never written
        ("and then the gate shut.", None),
        ("So as to keep the wolves out.", None),  # a purpose clause with no main clause, capitalised
        ("Such as the lantern and the rope.", None),
        ("I will tell you of the dangers upon", None),  # a preposition no sentence ends on
        ("The road is long. Wolves wait beneath", "The road is long."),
    ],
)
def test_a_reply_cut_on_a_word_no_sentence_ends_or_starts_with_is_trimmed_or_rejected(text: str, kept: str | None) -> None:
    scrubbed = scrub_dialogue(text, npc_name="Brom", npc_id="guard")
    if kept is None:
        assert [f.rule_id for f in scrubbed.failures] == ["sentence_fragment"]
    else:
        assert scrubbed.text == kept and not scrubbed.failures


@pytest.mark.parametrize(
    "text",
    [
        "who goes there?",  # a question in lower case is a whole one
        "when does the market open?",
        "when the bell rings, the gate shuts.",  # a clause before its main one
        "In order to pass, you need a writ.",
        "So that is how it is.",
        "Nothing to worry about.",
    ],
)
def test_a_whole_sentence_that_opens_like_a_tail_stays(text: str) -> None:
    assert scrub_dialogue(text, npc_name="Brom", npc_id="guard").findings == ()


#: What the embedded model wrote in the Godot demo, cut by the grammar at 160 characters.
AT_THE_BOUND = (
    "The captain is a medieval king. I am the one he wants you to come and visit, but I do not know your name. "
    "I will tell you that he does not know you and says 'no"
)


def test_a_dialogue_the_grammar_ended_at_its_bound_loses_its_unfinished_sentence(tmp_path: Path) -> None:
    assert len(AT_THE_BOUND) == 160
    assert scrub_dialogue(AT_THE_BOUND, npc_name="Brom", npc_id="guard").text == AT_THE_BOUND  # no word says it
    cut = scrub_dialogue(AT_THE_BOUND, npc_name="Brom", npc_id="guard", cut_at=160)
    assert cut.text == "The captain is a medieval king. I am the one he wants you to come and visit, but I do not know your name."
    # shorter than the bound, the same words are a line the model ended itself
    assert scrub_dialogue(AT_THE_BOUND, npc_name="Brom", npc_id="guard", cut_at=161).text == AT_THE_BOUND
    # through the pipeline, whose default generation limit is 160 characters
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say(AT_THE_BOUND)])
    assert pipeline.interact(ask("Good evening.")).dialogue.endswith("do not know your name.")


@pytest.mark.parametrize(
    "text", ["Example answer: The gate is closed.", "Remember: You should always be polite.", "Hail. Response: no."]
)
def test_meta_labels_are_rejected(text: str) -> None:
    assert [f.rule_id for f in scrub_dialogue(text, npc_name="Brom", npc_id="guard").failures] == ["meta_text"]
