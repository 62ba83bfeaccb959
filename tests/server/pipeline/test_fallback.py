"""Fallback lines obey the rules they stand in for: refused at registration when they break a
rule that always holds, skipped at run time when they break one active in context."""

from __future__ import annotations

from pathlib import Path

from factories import eldmoor_world, rich_guard_profile, rich_world, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import InteractionOutcome, TriggerReason
from loreguard.schemas.rules import Constraint
from loreguard.server.pipeline.expectancy import to_constraint
from loreguard.server.pipeline.fallback import choose_fallback, fallback_problems

DRAGON = {"id": "no_dragon", "type": "prohibition", "severity": "hard", "checks": {"forbidden_phrases": ["dragon"]}}


def _guard(lines: list[str], *rules: dict, by_trigger: dict | None = None) -> object:
    base = [r for r in rich_guard_profile().model_dump(mode="json")["rules"] if r["id"] != "no_dragon"]
    return rich_guard_profile(rules=[*base, *rules], fallbacks={"generic": lines, "by_trigger": by_trigger or {}})


def _problems(world: object, profile: object | None) -> list[tuple[str | None, str, str, str | None]]:
    found = fallback_problems(world, [profile] if profile is not None else [])  # type: ignore[arg-type]
    return [(p.npc_id, p.line, p.broken, p.failure.rule_id) for p in found]


def test_a_fallback_that_says_a_forbidden_word_is_a_registration_problem() -> None:
    profile = _guard(["Hmph.", "Beware the dragon."], DRAGON)
    assert _problems(rich_world(), profile) == [("guard", "npc.fallbacks.generic.1", "npc.rules.5", "no_dragon")]


def test_a_fallback_that_reveals_a_secret_is_a_registration_problem() -> None:
    profile = _guard([], by_trigger={"player_utterance": ["Fine. It's s1lver m00n."]})
    assert _problems(rich_world(), profile) == [
        ("guard", "npc.fallbacks.by_trigger.player_utterance.0", "npc.secrets.0", "password")
    ]


def test_world_lines_and_the_emergency_line_are_held_to_the_npcs_rules() -> None:
    world = eldmoor_world(fallbacks={"generic": ["A dragon! Run!"]}, emergency_fallback="The dragon stirs.")
    assert _problems(world, _guard(["Hmph."], DRAGON)) == [
        ("guard", "world.fallbacks.generic.0", "npc.rules.5", "no_dragon"),
        ("guard", "world.emergency_fallback", "npc.rules.5", "no_dragon"),
    ]


def test_a_world_rule_holds_for_the_npcs_it_names_and_for_no_others() -> None:
    scoped = {**DRAGON, "id": "guard_no_dragon", "conditions": {"npc_ids": ["guard"]}}
    world = eldmoor_world(rules=[scoped], fallbacks={"generic": ["The dragon sleeps."]})
    assert _problems(world, None) == []  # no NPC registered yet: the rule holds for nobody
    assert _problems(world, _guard(["Hmph."])) == [("guard", "world.fallbacks.generic.0", "world.rules.0", "guard_no_dragon")]
    assert _problems(world, _guard(["Hmph."]).model_copy(update={"id": "smith"})) == []  # type: ignore[attr-defined]


def test_soft_conditional_and_intent_rules_are_no_registration_problem() -> None:
    soft = {**DRAGON, "id": "soft_dragon", "severity": "soft"}
    zone = {**DRAGON, "id": "zone_dragon", "conditions": {"trigger_reasons": ["zone_trigger"]}}
    act = {"id": "must_open", "type": "requirement", "severity": "hard", "checks": {"required_intents": ["open_gate"]}}
    assert _problems(rich_world(), _guard(["The dragon sleeps."], soft, zone, act)) == []


def _active(*rules: dict) -> tuple[Constraint, ...]:
    return tuple(to_constraint(rich_guard_profile(rules=list(rules)).rules[i]) for i in range(len(rules)))


def test_a_fallback_that_breaks_a_rule_active_in_context_is_skipped_and_recorded() -> None:
    profile = _guard(["Beware the dragon.", "Hmph."])
    choice = choose_fallback(profile, rich_world(), TriggerReason.TIME_TRIGGER, 0, _active(DRAGON))
    assert (choice.text, choice.source) == ("Hmph.", "npc_generic")
    (skipped,) = choice.skipped
    assert skipped.line == "npc.fallbacks.generic.0" and [f.rule_id for f in skipped.failures] == ["no_dragon"]


def test_when_every_line_breaks_a_rule_the_emergency_line_then_silence_answers() -> None:
    profile = _guard(["Beware the dragon."])
    world = eldmoor_world(fallbacks={"generic": ["Dragon!"]}, emergency_fallback="...")
    choice = choose_fallback(profile, world, TriggerReason.TIME_TRIGGER, 2, _active(DRAGON))
    assert (choice.text, choice.source) == ("...", "emergency")
    assert [s.line for s in choice.skipped] == ["npc.fallbacks.generic.0", "world.fallbacks.generic.0"]
    quiet = eldmoor_world(emergency_fallback="The dragon watches.")
    silent = choose_fallback(profile, quiet, TriggerReason.TIME_TRIGGER, 0, _active(DRAGON))
    assert (silent.text, silent.source) == ("", "silence")
    assert [s.line for s in silent.skipped] == ["npc.fallbacks.generic.0", "world.emergency_fallback"]


def test_a_soft_rule_never_skips_a_fallback() -> None:
    choice = choose_fallback(
        _guard(["Beware the dragon."]), None, TriggerReason.CUSTOM, 0, _active({**DRAGON, "severity": "soft"})
    )
    assert (choice.text, choice.skipped) == ("Beware the dragon.", ())


def test_the_receipt_names_each_skipped_fallback_and_the_rule(tmp_path: Path) -> None:
    zone = {**DRAGON, "id": "zone_dragon", "conditions": {"trigger_reasons": ["player_utterance"]}}
    profile = _guard(["Hmph."], zone, by_trigger={"player_utterance": ["Beware the dragon.", "Move along."]})
    leak = say("Fine, it's silver moon.")
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [leak], profile=profile)
    result = pipeline.interact(ask("What's the password?"))
    assert result.outcome is InteractionOutcome.FALLBACK and result.dialogue == "Move along."
    (skipped,) = result.receipt.skipped_fallbacks
    assert skipped.line == "npc.fallbacks.by_trigger.player_utterance.0"
    assert [(f.rule_id, f.gate.value) for f in skipped.failures] == [("zone_dragon", "constraints")]
    assert pipeline.counters["fallback_lines_skipped"] == 1
