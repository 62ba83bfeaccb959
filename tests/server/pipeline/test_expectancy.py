"""Stage 2: rules -> constraints, in a deterministic order; behavioural rules and feedback."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import rich_guard_profile

from loreguard.memory import MemoryStore
from loreguard.schemas import BehaviourStats, ExpectancyRule, InteractionContext
from loreguard.server.pipeline.expectancy import behaviour_active, behaviour_confidence, evaluate_rules


def _ctx(**kw: object) -> InteractionContext:
    return InteractionContext.model_validate({"npc_id": "guard", "trigger_reason": "player_utterance", **kw})


def _rule(rule_id: str, **kw: object) -> ExpectancyRule:
    return ExpectancyRule.model_validate({"id": rule_id, "type": "prohibition", "prompt_injection": rule_id, **kw})


def test_conditions() -> None:
    rules = [
        _rule("zone_only", conditions={"trigger_reasons": ["zone_trigger"]}),
        _rule("guard_only", conditions={"npc_ids": ["guard"]}),
        _rule("tavern", conditions={"scenes": ["tavern"]}),
        _rule("any_tag", conditions={"tags_any": ["night", "storm"]}),
        _rule("all_tags", conditions={"tags_all": ["night", "storm"]}),
        _rule("early", conditions={"max_interaction": 2}),
        _rule("late", conditions={"min_interaction": 5}),
        _rule("alarm", conditions={"world_state": {"alarm": True}}),
        _rule("count_is_1", conditions={"world_state": {"count": 1}}),
    ]
    state = {"alarm": True, "count": True}  # True is not 1: types must match
    got = evaluate_rules(rules, _ctx(scene="gate", tags=["night"]), 3, state, {}).constraints.ids()
    assert got == ("alarm", "any_tag", "guard_only")
    got = evaluate_rules(rules, _ctx(scene="tavern", tags=["night", "storm"]), 6, {}, {})
    assert got.constraints.ids() == ("all_tags", "any_tag", "guard_only", "late", "tavern")
    assert got.missing_state == ("alarm", "count")


def test_order_is_severity_type_priority_id() -> None:
    rules = [
        _rule("b_soft", severity="soft"),
        _rule("a_hard_req", type="requirement", severity="hard"),
        _rule("z_crit", severity="critical"),
        _rule("c_hard", severity="hard", priority=5),
        _rule("a_hard", severity="hard"),
        _rule("perm", type="permission", severity="soft"),
    ]
    forward = evaluate_rules(rules, _ctx(), 0, {}, {}).constraints
    backward = evaluate_rules(list(reversed(rules)), _ctx(), 0, {}, {}).constraints
    assert forward == backward
    assert forward.ids() == ("z_crit", "c_hard", "a_hard", "a_hard_req", "b_soft", "perm")
    text = forward.to_prompt_injection()
    assert text.splitlines()[0] == "- IMPORTANT: Never: z_crit"
    assert "- Always: a_hard_req" in text and "- You may: perm" in text


def test_prompt_text_falls_back_to_checks() -> None:
    rule = _rule("x", prompt_injection="", checks={"forbidden_phrases": ["orcs"]})
    (c,) = evaluate_rules([rule], _ctx(), 0, {}, {}).constraints.constraints
    assert c.text == 'say "orcs"'


@pytest.mark.parametrize(
    ("positive", "negative", "active"),
    [(0, 0, False), (2, 0, False), (3, 0, True), (3, 1, False), (5, 2, True), (10, 9, False)],
)
def test_beta_binomial_activation(positive: int, negative: int, active: bool) -> None:
    stats = BehaviourStats(rule_id="r", positive=positive, negative=negative)
    assert behaviour_confidence(stats) == (2 + positive) / (7 + positive + negative)
    assert behaviour_active(stats) is active


def test_behavioural_rule_activates_after_feedback_and_persists(tmp_path: Path) -> None:
    profile = rich_guard_profile()
    path = tmp_path / "m.sqlite"
    with MemoryStore(path) as store:
        store.register_npc(profile)
        ids = lambda: evaluate_rules(profile.rules, _ctx(), 0, {"alarm": False}, store.behaviour.all_stats()).constraints.ids()  # noqa: E731
        assert "polite" not in ids()
        for _ in range(3):
            store.behaviour.record_correction("polite", +1)
        assert "polite" in ids()
    with MemoryStore(path) as reopened:
        assert reopened.behaviour.stats("polite").positive == 3
        reopened.behaviour.record_correction("polite", -1)
        stats = reopened.behaviour.all_stats()
        assert "polite" not in evaluate_rules(profile.rules, _ctx(), 0, {"alarm": False}, stats).constraints.ids()
        with pytest.raises(ValueError):
            reopened.behaviour.record_correction("polite", 0)


def test_a_rule_limited_to_task_types_applies_only_to_them() -> None:
    from loreguard.schemas.interaction import TaskType

    rules = [_rule("haggle", conditions={"task_types": ["trade"]}), _rule("always")]
    assert evaluate_rules(rules, _ctx(), 0, {}, {}, task_type=TaskType.TRADE).constraints.ids() == ("always", "haggle")
    assert evaluate_rules(rules, _ctx(), 0, {}, {}, task_type=TaskType.LORE_QUESTION).constraints.ids() == ("always",)
    assert evaluate_rules(rules, _ctx(), 0, {}, {}).constraints.ids() == ("always",)  # task unknown: a scoped rule stays off


@pytest.mark.parametrize(
    ("value", "expected", "mistyped"),
    [
        ("yes", True, True),
        (1, True, True),
        (True, 1, True),
        ("3", 3, True),
        (3, 3.0, False),
        (True, True, False),
        ("x", "x", False),
    ],
)
def test_a_wrongly_typed_state_value_is_insufficient_never_false(value: object, expected: object, mistyped: bool) -> None:
    rule = _rule("curfew", conditions={"world_state": {"curfew": expected}})
    evaluation = evaluate_rules([rule], _ctx(), 0, {"curfew": value}, {})
    assert evaluation.mistyped_state == (("curfew",) if mistyped else ())
    assert evaluation.constraints.ids() == (() if mistyped else ("curfew",))
