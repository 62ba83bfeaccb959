"""Stage 2: the expectancy engine. Designer rules + the interaction -> a ConstraintSet.

Pure: the same rules, context, state and feedback always give the same constraints in the same
order (severity, then type, then priority, then rule id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from loreguard.memory.hashing import content_hash
from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.interaction import InteractionContext, TaskType
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.rules import (
    RULE_TYPE_RANK,
    SEVERITY_RANK,
    BehaviourStats,
    Constraint,
    ExpectancyRule,
    RuleType,
    Severity,
)
from loreguard.server.pipeline.errors import ConstraintIdCollision

#: Beta-Binomial prior for behavioural rules: skeptical until designers confirm them.
PRIOR_ALPHA = 2
PRIOR_BETA = 5
MIN_OBSERVATIONS = 3
MIN_CONFIDENCE = 0.5


def behaviour_confidence(stats: BehaviourStats) -> float:
    """Posterior mean of a Beta(2 + positive, 5 + negative)."""
    return (PRIOR_ALPHA + stats.positive) / (PRIOR_ALPHA + PRIOR_BETA + stats.positive + stats.negative)


def behaviour_active(stats: BehaviourStats) -> bool:
    """Active at >= 3 observations and posterior confidence >= 0.5."""
    observations = stats.positive + stats.negative
    return observations >= MIN_OBSERVATIONS and behaviour_confidence(stats) >= MIN_CONFIDENCE


def constraint_order(c: Constraint) -> tuple:
    return (-SEVERITY_RANK[c.severity], RULE_TYPE_RANK[c.type], -c.priority, c.rule_id, c.escalation)


class ConstraintSet(FrozenModel):
    """The active constraints for one attempt, in their deterministic order."""

    constraints: tuple[Constraint, ...] = ()

    @classmethod
    def of(cls, constraints: Iterable[Constraint]) -> ConstraintSet:
        """The set of `constraints`, one per rule id: a more escalated copy of a rule replaces
        the rule, an identical copy is the same rule. Two different constraints with one id at
        the same escalation are refused (`ConstraintIdCollision`): keeping either would drop the
        other's checks without a word, and which came first must not decide."""
        by_id: dict[str, Constraint] = {}
        for c in constraints:
            kept = by_id.get(c.rule_id)
            if kept is None or c.escalation > kept.escalation:
                by_id[c.rule_id] = c
            elif c.escalation == kept.escalation and c != kept:
                raise ConstraintIdCollision(c.rule_id)
        return cls(constraints=tuple(sorted(by_id.values(), key=constraint_order)))

    def ids(self) -> tuple[str, ...]:
        return tuple(c.rule_id for c in self.constraints)

    def hash(self) -> str:
        # Memoised on the constraints' identity: the same rules give the very same constraint
        # objects interaction after interaction (`to_constraint` is memoised too), and the hash
        # is asked for twice a turn (snapshot hash, receipt).
        return _SET_HASHES.get(self.constraints, lambda: content_hash(self))

    def to_prompt_injection(self) -> str:
        """The rules as prompt lines, in the set's order (`constraint_order`): by severity,
        critical first, then by type (prohibitions, requirements, permissions), priority and id."""
        return _INJECTIONS.get(self.constraints, self._prompt_lines)

    def _prompt_lines(self) -> str:
        lines = []
        for c in self.constraints:
            verb = {RuleType.PROHIBITION: "Never", RuleType.REQUIREMENT: "Always", RuleType.PERMISSION: "You may"}[c.type]
            emphasis = "IMPORTANT: " if c.escalation > 0 or c.severity is Severity.CRITICAL else ""
            lines.append(f"- {emphasis}{verb}: {c.text}")
        return "\n".join(lines)


_SET_HASHES: IdentityMemo[str] = IdentityMemo(maxsize=1024)
_INJECTIONS: IdentityMemo[str] = IdentityMemo(maxsize=1024)


class RuleEvaluation(FrozenModel):
    constraints: ConstraintSet
    #: World-state keys that some rule's conditions need but the game never set.
    missing_state: tuple[str, ...] = ()
    #: World-state keys whose value is not of the type a rule's condition compares it with
    #: (`"yes"` where a rule expects `true`): insufficient context, never read as false.
    mistyped_state: tuple[str, ...] = ()
    #: The rules those keys left unevaluated, by id: the receipt names them on a `clarify`.
    unevaluable_rules: tuple[str, ...] = ()


def same_json_type(value: JsonScalar, expected: JsonScalar) -> bool:
    """Whether a state value can be compared with a condition's value: bool is not a number,
    and an int compares with a float."""
    if isinstance(expected, bool) or isinstance(value, bool):
        return isinstance(expected, bool) and isinstance(value, bool)
    if isinstance(expected, int | float):
        return isinstance(value, int | float)
    return type(value) is type(expected)


def rule_text(rule: ExpectancyRule) -> str:
    """What the prompt says about a rule: its injection text, else its description, else a
    sentence made from its checks."""
    if rule.prompt_injection:
        return rule.prompt_injection
    if rule.description:
        return rule.description
    parts = []
    checks = rule.checks
    if checks.forbidden_phrases:
        parts.append("say " + ", ".join(f'"{p}"' for p in checks.forbidden_phrases))
    if checks.required_phrases:
        parts.append("include " + ", ".join(f'"{p}"' for p in checks.required_phrases))
    if checks.max_length:
        parts.append(f"speak more than {checks.max_length} characters")
    return "; ".join(parts) or rule.id


def to_constraint(rule: ExpectancyRule) -> Constraint:
    """The constraint a rule becomes when its conditions hold (one object per rule object,
    built once: a rule is frozen, so its constraint never changes)."""
    return _CONSTRAINTS.get((rule,), lambda: _new_constraint(rule))


_CONSTRAINTS: IdentityMemo[Constraint] = IdentityMemo(maxsize=4096)
_RULE_CONSTRAINTS: IdentityMemo[tuple[Constraint, ...]] = IdentityMemo(maxsize=256)


def _new_constraint(rule: ExpectancyRule) -> Constraint:
    return Constraint(
        rule_id=rule.id,
        type=rule.type,
        severity=rule.severity,
        text=rule_text(rule),
        checks=rule.checks,
        priority=rule.priority,
        behavioural=rule.behavioural,
    )


def holds_everywhere(rule: ExpectancyRule, npc_id: str | None) -> bool:
    """Whether a rule applies to every interaction of `npc_id` whatever its context: it has no
    condition but, at most, a list of NPCs naming this one (None: an NPC not yet known, which
    only a rule without any condition covers). Behavioural rules never do: they wait for
    designer feedback."""
    given = rule.conditions.model_dump(exclude_defaults=True)
    if given.get("min_interaction") == 0:
        del given["min_interaction"]
    npc_ids = given.pop("npc_ids", None)
    return not rule.behavioural and not given and (npc_ids is None or npc_id in npc_ids)


class StateTypeConflict(FrozenModel):
    """A state value a rule's condition cannot compare with."""

    key: str
    rule_id: str
    expected: JsonScalar
    value: JsonScalar


def state_type_conflicts(rules: Iterable[ExpectancyRule], values: Mapping[str, JsonScalar]) -> list[StateTypeConflict]:
    """Every (key, rule) where `values` would give a key a type the rule's condition does not
    compare with, sorted by key then rule id: what `world.set_state` refuses."""
    conflicts = [
        StateTypeConflict(key=key, rule_id=rule.id, expected=rule.conditions.world_state[key], value=value)
        for rule in rules
        for key, value in values.items()
        if key in rule.conditions.world_state and not same_json_type(value, rule.conditions.world_state[key])
    ]
    return sorted(conflicts, key=lambda c: (c.key, c.rule_id))


class RuleIdCollision(FrozenModel):
    """A world rule and an NPC rule with one id: `rules[world_index]` of the world and
    `rules[npc_index]` of the NPC."""

    rule_id: str
    world_id: str
    world_index: int
    npc_id: str
    npc_index: int


def rule_id_collisions(world: WorldDefinition | None, profiles: Iterable[NpcProfile]) -> list[RuleIdCollision]:
    """Every world rule whose id an NPC's rule also has, sorted by NPC id then rule id: what
    `npc.register` and `world.load` refuse. A rule id names one rule for the NPCs of a world, so
    the interaction never has to choose which of two rules it meant."""
    if world is None:
        return []
    world_index = {rule.id: i for i, rule in enumerate(world.rules)}
    collisions = [
        RuleIdCollision(rule_id=rule.id, world_id=world.id, world_index=world_index[rule.id], npc_id=profile.id, npc_index=i)
        for profile in profiles
        for i, rule in enumerate(profile.rules)
        if rule.id in world_index
    ]
    return sorted(collisions, key=lambda c: (c.npc_id, c.rule_id))


def _conditions_hold(
    rule: ExpectancyRule,
    ctx: InteractionContext,
    interaction_index: int,
    state: Mapping[str, JsonScalar],
    task_type: TaskType | None,
) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """Whether the rule applies, the state keys it needs that are missing, and those whose
    value has the wrong type."""
    cond = rule.conditions
    if cond.trigger_reasons and ctx.trigger_reason not in cond.trigger_reasons:
        return False, (), ()
    if cond.task_types and task_type not in cond.task_types:
        return False, (), ()
    if cond.npc_ids and ctx.npc_id not in cond.npc_ids:
        return False, (), ()
    if cond.scenes and ctx.scene not in cond.scenes:
        return False, (), ()
    if cond.tags_any and set(ctx.tags).isdisjoint(cond.tags_any):
        return False, (), ()
    if cond.tags_all and not set(ctx.tags).issuperset(cond.tags_all):
        return False, (), ()
    if cond.min_interaction is not None and interaction_index < cond.min_interaction:
        return False, (), ()
    if cond.max_interaction is not None and interaction_index > cond.max_interaction:
        return False, (), ()
    if not cond.world_state:
        return True, (), ()
    missing = tuple(sorted(key for key in cond.world_state if key not in state))
    mistyped = tuple(
        sorted(key for key, expected in cond.world_state.items() if key in state and not same_json_type(state[key], expected))
    )
    if missing or mistyped:
        return False, missing, mistyped
    for key, expected in sorted(cond.world_state.items()):
        if state[key] != expected:
            return False, (), ()
    return True, (), ()


def evaluate_rules(
    rules: Iterable[ExpectancyRule],
    ctx: InteractionContext,
    interaction_index: int,
    state: Mapping[str, JsonScalar],
    behaviour: Mapping[str, BehaviourStats],
    *,
    task_type: TaskType | None = None,
) -> RuleEvaluation:
    """Every rule whose conditions hold becomes a constraint. Behavioural rules count only once
    designer feedback has made them confident (see `behaviour_active`). A rule limited to task
    types applies only when `task_type` (the contract's) is one of them."""
    constraints = []
    missing: set[str] = set()
    mistyped: set[str] = set()
    unevaluable: set[str] = set()
    rules = tuple(rules)
    # Each rule's constraint, looked up once for the whole rule list (the same rule objects,
    # interaction after interaction).
    made = _RULE_CONSTRAINTS.get(rules, lambda: tuple(to_constraint(rule) for rule in rules))
    for rule, constraint in zip(rules, made, strict=True):
        holds, needs, wrong = _conditions_hold(rule, ctx, interaction_index, state, task_type)
        missing.update(needs)
        mistyped.update(wrong)
        if needs or wrong:
            unevaluable.add(rule.id)
        if not holds:
            continue
        if rule.behavioural and not behaviour_active(behaviour.get(rule.id) or BehaviourStats(rule_id=rule.id)):
            continue
        constraints.append(constraint)
    return RuleEvaluation(
        constraints=ConstraintSet.of(constraints),
        missing_state=tuple(sorted(missing)),
        mistyped_state=tuple(sorted(mistyped)),
        unevaluable_rules=tuple(sorted(unevaluable)),
    )
