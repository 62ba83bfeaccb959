"""Fallback lines obey the rules they stand in for: refused at registration when they break a
rule that always holds, skipped at run time when they break one active in context; and two
fallbacks in a row never say the same line while another passes."""

from __future__ import annotations

from pathlib import Path

from factories import eldmoor_world, rich_guard_profile, rich_world, say
from pipeline_helpers import ask, make_pipeline
from stores import open_store

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.schemas import InteractionOutcome, TriggerReason
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.npc import Fallbacks
from loreguard.schemas.rules import Constraint
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
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


def test_a_fallback_that_says_an_act_is_done_is_a_registration_problem() -> None:
    """A fallback grants nothing: "Go on through" in one would leave the gate shut behind it."""
    guard = next(p for p in demo_npcs() if p.id == "guard")
    profile = guard.model_copy(update={"fallbacks": Fallbacks(generic=("Hmph.", "Fine. Go on through, traveller."))})
    assert _problems(demo_world(), profile) == [
        ("guard", "npc.fallbacks.generic.1", "npc.allowed_intents.0", "grants_in_words_only")
    ]
    assert _problems(demo_world(), guard) == []  # the demo's own lines say no such thing


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


# --- two fallbacks never say the same line while the pool holds another (issue 47) -------------

ZONE_LINE = "Stay clear of the gatehouse."


def _zone_world() -> object:
    return rich_world(fallbacks={"by_trigger": {"zone_trigger": [ZONE_LINE]}})


def test_a_zone_fallback_after_a_players_fallback_says_the_zones_own_line(tmp_path: Path) -> None:
    """The pool differs per trigger: the zone's is [zone line, generic line], and the count (1)
    lands on the generic line the player's fallback just said. The last line is passed over."""
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [], profile=_guard(["Hmph."]), world=_zone_world())  # type: ignore[arg-type]
    before = pipeline.store.memory_hash()
    first = pipeline.interact(ask("hi"))  # no model: every interaction falls back
    zone = pipeline.interact(ask("", trigger="zone_trigger"))
    assert (first.dialogue, zone.dialogue) == ("Hmph.", ZONE_LINE)
    assert zone.receipt.fallback_reason.endswith("world_trigger") and zone.receipt.skipped_fallbacks == ()
    assert pipeline.store.last_fallback("guard") == ZONE_LINE
    assert pipeline.store.memory_hash() == before  # the last line is bookkeeping, not memory


def test_the_last_line_is_said_again_when_no_other_passes() -> None:
    profile = _guard(["Beware the dragon.", "Hmph."])
    choice = choose_fallback(profile, None, TriggerReason.CUSTOM, 1, _active(DRAGON), last_said="Hmph.")
    assert (choice.text, [s.line for s in choice.skipped]) == ("Hmph.", ["npc.fallbacks.generic.0"])
    assert choose_fallback(profile, None, TriggerReason.CUSTOM, 1, last_said="Hmph.").text == "Beware the dragon."


def test_fallbacks_of_one_trigger_alternate_with_a_reply_between_once_memory_prunes(tmp_path: Path) -> None:
    """Past the episodic limit the count steps on replies too (fallback, reply, fallback moved
    it by two); the last line still keeps the two fallbacks apart."""
    store = MemoryStore(tmp_path / "m.sqlite", policy=MemoryPolicy(episodic_limit=2))
    assert store.load_world(rich_world()).committed
    assert store.register_npc(_guard(["Hmph.", "Not now."], DRAGON)).committed  # type: ignore[arg-type]
    dragon = [say("Beware the dragon.")] * 3
    replies = [say("Rain again, friend."), say("The mill is past the bridge."), say("The river runs high.")]
    pipeline = GovernancePipeline(store, ScriptedBackend([*replies, *dragon, say("Mind the mud."), *dragon]))
    heard = [pipeline.interact(ask(line)) for line in ("Hi.", "The mill?", "The river?", "News?", "Weather?", "News?")]
    assert [r.outcome for r in heard] == [InteractionOutcome.VALIDATED] * 3 + [
        InteractionOutcome.FALLBACK,
        InteractionOutcome.VALIDATED,
        InteractionOutcome.FALLBACK,
    ]
    assert (heard[3].dialogue, heard[5].dialogue) == ("Not now.", "Hmph.")


def test_a_save_slot_keeps_the_last_fallback_line(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", [], profile=_guard(["Hmph.", "Not now."]))  # type: ignore[arg-type]
    store = pipeline.store
    store.slots.save("before")
    assert pipeline.interact(ask("hi")).dialogue == "Hmph."
    store.slots.save("after")
    assert pipeline.interact(ask("hi")).dialogue == "Not now."
    store.slots.load("after")
    assert store.last_fallback("guard") == "Hmph."
    store.slots.load("before")
    assert store.last_fallback("guard") is None
    store.slots.load("after")
    store.close()
    with MemoryStore(tmp_path / "m.sqlite") as reopened:  # and the file keeps it
        assert reopened.last_fallback("guard") == "Hmph."


def test_a_replay_of_consecutive_fallbacks_picks_the_same_lines(tmp_path: Path) -> None:
    """The record keeps the last line the NPC said, so a replay of the zone's fallback passes
    over the same line as it did."""
    store = open_store(tmp_path / "m.sqlite", world=_zone_world(), npcs=[_guard(["Hmph."], DRAGON)])  # type: ignore[list-item,arg-type]
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    # every attempt breaks a rule (a replay takes the model's outputs from the record)
    pipeline = GovernancePipeline(store, ScriptedBackend([say("Beware the dragon.")] * 6), recorder=recorder)
    heard = [pipeline.interact(ask("hi")).dialogue, pipeline.interact(ask("", trigger="zone_trigger")).dialogue]
    assert heard == ["Hmph.", ZONE_LINE]
    package = recorder.export(PackageSelection(), exported_by="test")
    assert [r.before.last_fallback for r in package.records] == [None, "Hmph."]
    report = Replayer(package).run()
    assert (report.exact_matches, report.drifts) == (2, 0), [r.details for r in report.results]
