"""Numbers in dialogue against the values the prompt carried (server/pipeline/gate/grounding.py), the
gate that reports them, and a trader held to its prices end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import guard_profile, rich_world, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import CanonicalFact, GateName, InteractionOutcome, Severity, UngroundedNumbers
from loreguard.server.pipeline.gate.grounding import describe, find_number_problems, subjects_in_context

LANTERN = CanonicalFact.model_validate(
    {
        "id": "lantern_price",
        "text": "A lantern costs 5 silver.",
        "claims": [{"subject": "lantern", "attribute": "price", "value": "5 silver"}],
    }
)
STATE = (("alarm", False), ("guards.count", 4), ("price.sword", 50), ("weather", "rain"))
SUBJECTS = subjects_in_context(STATE, [LANTERN])


def test_subjects_are_the_numeric_values_the_prompt_carried() -> None:
    assert [(s.label, s.value, sorted(s.nouns), s.money) for s in SUBJECTS] == [
        ("world_state:guards.count", 4, ["guard"], False),
        ("world_state:price.sword", 50, ["sword"], True),
        ("canonical:lantern_price", 5, ["lantern"], True),
    ]


@pytest.mark.parametrize(
    ("dialogue", "problem"),
    [
        ("A sword costs 500 gold.", "price.sword is 50, the reply says 500 gold"),
        ("A sword costs five hundred gold.", "price.sword is 50, the reply says five hundred gold"),
        ("A sword costs 5 gold.", "price.sword is 50, the reply says 5 gold"),
        ("Swords are 500 coins apiece.", "price.sword is 50, the reply says 500 coins"),
        ("The sword is 500.", "price.sword is 50, the reply says 500"),
        ("For 500 gold the sword is yours.", "price.sword is 50, the reply says 500 gold"),
        ("A lantern is 7 silver.", "lantern price is 5, the reply says 7 silver"),
        ("Two guards watch the gate.", "guards.count is 4, the reply says two"),
        ("A sword for 500 coins, a lantern for 5 silver.", "price.sword is 50, the reply says 500 coins"),
    ],
)
def test_a_number_about_a_value_in_context_must_match_it(dialogue: str, problem: str) -> None:
    assert [describe(p) for p in find_number_problems(dialogue, SUBJECTS)] == [problem]


@pytest.mark.parametrize(
    "dialogue",
    [
        "A sword costs 50 gold.",  # the value, in digits
        "A sword costs fifty gold.",  # the value, in words
        "Fifty coins for a fine sword.",
        "A lantern costs five silver.",
        "Four guards, all armed.",
        "I've worked here 20 years.",  # counting something the context has no key for
        "Twelve men died at the ford.",
        "Two swords cost 100 gold.",  # a total, not the price of one
        "One lantern, freshly oiled.",  # counting lanterns, not their price
        "Three swords and a lantern for 5 silver.",
        "Come back at 6 o'clock.",  # times
        "We open at 9, the sword will wait.",
        "The gate closes at dusk.",
        "The first time I held a sword I was ten.",  # an ordinal; a number about the speaker
        "The sword is the one for you.",  # "one" as a pronoun
        "I held a sword when I was ten.",  # about the speaker
    ],
)
def test_no_false_positives(dialogue: str) -> None:
    assert find_number_problems(dialogue, SUBJECTS) == []


def test_an_amount_about_nothing_in_context_is_ungrounded() -> None:
    (problem,) = find_number_problems("That costs 30 gold.", SUBJECTS)
    assert problem.subject is None and problem.stated == "30 gold"
    assert find_number_problems("Two guards and 20 years.", ()) == []  # counting is never ungrounded


def test_a_number_value_in_world_state_text_counts_too() -> None:
    (subject,) = subjects_in_context((("toll", "5 silver"),), ())
    assert subject.money and subject.value == 5 and subject.nouns == {"toll"}
    assert [describe(p) for p in find_number_problems("The toll is 50 silver.", (subject,))] == [
        "toll is 5, the reply says 50 silver"
    ]


# --- end to end: a trader held to its prices -------------------------------------------------


def _trader(**profile: object):
    world = rich_world(initial_state={"weather": "rain", "price.sword": 50})
    return guard_profile(**profile), world


def test_a_wrong_price_fails_hard_and_the_retry_is_told_the_right_one(tmp_path: Path) -> None:
    profile, world = _trader()
    outputs = [say("A sword costs 500 gold."), say("A sword costs 50 gold, friend.")]
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", outputs, profile=profile, world=world)
    result = pipeline.interact(ask("How much does a sword cost?"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 2
    assert result.dialogue == "A sword costs 50 gold, friend."
    (failure,) = result.receipt.attempts[0].failures
    assert failure.gate is GateName.GROUNDING and failure.severity is Severity.HARD
    assert failure.rule_id == "world_state:price.sword" and failure.reason == "price.sword is 50, the reply says 500 gold"
    repair = backend.requests[1].prompt.full
    assert "price.sword is 50, the reply says 500 gold" in repair and '"500 gold"' in repair


def test_a_wrong_price_every_time_ends_in_the_fallback_with_memory_unchanged(tmp_path: Path) -> None:
    profile, world = _trader()
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say("Swords are 500 gold.")] * 3, profile=profile, world=world)
    before = pipeline.store.memory_hash()
    result = pipeline.interact(ask("How much does a sword cost?"))
    assert result.outcome is InteractionOutcome.FALLBACK and result.receipt.fallback_reason.startswith("attempts_exhausted")
    assert pipeline.store.memory_hash() == before


def test_a_price_the_prompt_did_not_carry_is_not_checked(tmp_path: Path) -> None:
    # Small talk carries no world state, so the sword's price is not part of this context.
    profile, world = _trader()
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Swords? 500 gold, they say.")], profile=profile, world=world)
    result = pipeline.interact(ask("Lovely rain today"))
    assert "price.sword" not in backend.requests[0].prompt.full
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 1


def test_ungrounded_amounts_are_flagged_where_the_profile_says_so(tmp_path: Path) -> None:
    profile, world = _trader(ungrounded_numbers="flag")
    assert profile.ungrounded_numbers is UngroundedNumbers.FLAG
    outputs = [say("The shield is 30 gold."), say("The shield? Ask the smith."), say("Unused.")]
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", outputs, profile=profile, world=world)
    result = pipeline.interact(ask("What does the shield cost?"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 2
    (failure,) = result.receipt.attempts[0].failures
    assert failure.severity is Severity.SOFT and failure.rule_id == "ungrounded_numbers"
    assert failure.reason == "states an amount (30 gold) that nothing in its context gives"


def test_ungrounded_amounts_bend_with_a_warning_on_the_last_attempt(tmp_path: Path) -> None:
    profile, world = _trader(ungrounded_numbers="flag")
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say("The shield is 30 gold.")] * 3, profile=profile, world=world)
    result = pipeline.interact(ask("What does the shield cost?"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 3
    assert [w.rule_id for w in result.receipt.warnings] == ["ungrounded_numbers"]


def test_by_default_ungrounded_amounts_pass(tmp_path: Path) -> None:
    profile, world = _trader()
    assert profile.ungrounded_numbers is UngroundedNumbers.ALLOW
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say("The shield is 30 gold.")], profile=profile, world=world)
    result = pipeline.interact(ask("What does the shield cost?"))
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 1 and not result.receipt.warnings


def test_a_claim_the_claim_checker_caught_is_not_reported_twice(tmp_path: Path) -> None:
    facts = [*guard_profile().model_dump(mode="json")["canonical_facts"], LANTERN.model_dump(mode="json")]
    profile = guard_profile(
        canonical_facts=[{**f, "claims": [{**c, "cues": ["costs"]} for c in f.get("claims", [])]} for f in facts]
    )
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [say("A lantern costs 7 silver."), say("Five silver.")], profile=profile)
    result = pipeline.interact(ask("What does a lantern cost?"))
    assert [f.rule_id for f in result.receipt.attempts[0].failures] == ["lantern_price"]


def test_the_same_wrong_price_gives_the_same_bytes(tmp_path: Path) -> None:
    from loreguard.memory import canonical_json

    def run(name: str) -> tuple[bytes, list[str], str]:
        profile, world = _trader()
        outputs = [say("A sword costs 500 gold, two for 900 gold."), say("A sword costs 50 gold.")]
        pipeline, backend = make_pipeline(tmp_path / name, outputs, profile=profile, world=world)
        result = pipeline.interact(ask("How much does a sword cost?"))
        assert result.attempts == 2
        return (
            canonical_json([a.model_dump(mode="json") for a in result.receipt.attempts]),
            [r.prompt.full for r in backend.requests],
            pipeline.store.memory_hash(),
        )

    assert run("a.sqlite") == run("b.sqlite")
