"""Task contracts: what kind of interaction this is, which memory it needs, and whether the
gathered context is sufficient before any model is called (pass / retry / clarify).

Classification is keyword- and trigger-based and deterministic. Canonical facts are always in
the prompt (they live in the static prefix, which is what makes KV-cache reuse possible); the
contract gates the dynamic sections.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from loreguard.memory.retrieval import keywords
from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.interaction import InteractionContext, TaskType, TriggerReason

__all__ = ["TaskType"]  # defined with the wire models: rule conditions name task types


class Section(str, Enum):
    WORLD_STATE = "world_state"
    EPISODIC = "episodic"
    BELIEFS = "beliefs"
    EXCHANGES = "exchanges"


#: Keyword cues per task type, checked in this order; the type with most hits wins, ties go to
#: the earlier type.
TASK_KEYWORDS: tuple[tuple[TaskType, frozenset[str]], ...] = (
    (TaskType.QUEST, frozenset("quest task job work help reward mission bounty errand hunt".split())),
    (TaskType.TRADE, frozenset("buy sell price cost trade gold coin coins wares shop pay".split())),
    (
        TaskType.LORE_QUESTION,
        frozenset("who history king queen legend lore tell know story ancient war name city town river".split()),
    ),
)

SECTIONS: dict[TaskType, frozenset[Section]] = {
    TaskType.LORE_QUESTION: frozenset({Section.BELIEFS, Section.EPISODIC, Section.EXCHANGES}),
    TaskType.QUEST: frozenset({Section.WORLD_STATE, Section.EPISODIC, Section.EXCHANGES}),
    TaskType.TRADE: frozenset({Section.WORLD_STATE, Section.EXCHANGES}),
    TaskType.SMALL_TALK: frozenset({Section.EPISODIC, Section.BELIEFS, Section.EXCHANGES}),
    TaskType.AMBIENT: frozenset({Section.WORLD_STATE}),
    TaskType.WORLD_EVENT: frozenset({Section.WORLD_STATE, Section.BELIEFS}),
    TaskType.NPC_EXCHANGE: frozenset({Section.WORLD_STATE, Section.BELIEFS, Section.EPISODIC}),
}

#: World-state key prefixes a task needs at least one key under, when its trigger says so.
REQUIRED_STATE_PREFIXES: dict[TriggerReason, tuple[str, ...]] = {TriggerReason.QUEST_TRIGGER: ("quest.",)}


class ContextContract(FrozenModel):
    task_type: TaskType
    sections: tuple[Section, ...]
    #: Prefixes of world-state keys of which at least one must be present.
    required_prefixes: tuple[str, ...] = ()


def classify(ctx: InteractionContext) -> TaskType:
    trigger = ctx.trigger_reason
    if trigger is TriggerReason.QUEST_TRIGGER:
        return TaskType.QUEST
    if trigger in (TriggerReason.ZONE_TRIGGER, TriggerReason.TIME_TRIGGER):
        return TaskType.AMBIENT
    if trigger is TriggerReason.WORLD_EVENT:
        return TaskType.WORLD_EVENT
    if trigger is TriggerReason.NPC_INTERACTION:
        return TaskType.NPC_EXCHANGE
    words = keywords(ctx.player_input)
    best, best_hits = TaskType.SMALL_TALK, 0
    for task, cues in TASK_KEYWORDS:
        hits = len(words & cues)
        if hits > best_hits:
            best, best_hits = task, hits
    return best


def contract_for(ctx: InteractionContext) -> ContextContract:
    task = classify(ctx)
    return ContextContract(
        task_type=task,
        sections=tuple(sorted(SECTIONS[task], key=lambda s: s.value)),
        required_prefixes=REQUIRED_STATE_PREFIXES.get(ctx.trigger_reason, ()),
    )


class Verdict(str, Enum):
    PASS = "pass"
    RETRY = "retry"
    CLARIFY = "clarify"


class Sufficiency(FrozenModel):
    verdict: Verdict
    #: What is missing: `world_state:KEY`, or `world_state:PREFIX*` for a required prefix.
    missing: tuple[str, ...] = ()
    #: Values that can be derived for missing keys (from the world's `state_defaults`).
    derived: dict[str, JsonScalar] = {}
    #: Keys the game set with a value of the wrong type for a rule that compares them.
    mistyped: tuple[str, ...] = ()


def check_sufficiency(
    contract: ContextContract,
    missing_rule_keys: tuple[str, ...],
    state: Mapping[str, JsonScalar],
    defaults: Mapping[str, JsonScalar],
    mistyped_keys: tuple[str, ...] = (),
) -> Sufficiency:
    """pass when nothing is missing; retry when every missing key can be derived from
    `defaults` (the caller re-gathers with them); clarify otherwise, naming what the game must
    provide. A key whose value has the wrong type for a rule is never derived over: the game
    set it, so only the game can fix it (clarify). The model is never called on insufficient
    context."""
    if mistyped_keys:
        return Sufficiency(
            verdict=Verdict.CLARIFY,
            missing=tuple(sorted(f"world_state:{key}" for key in mistyped_keys)),
            mistyped=tuple(sorted(mistyped_keys)),
        )
    missing_keys = set(missing_rule_keys)
    missing_prefixes = []
    for prefix in contract.required_prefixes:
        if not any(key.startswith(prefix) for key in state):
            if any(key.startswith(prefix) for key in defaults):
                missing_keys.update(key for key in defaults if key.startswith(prefix))
            else:
                missing_prefixes.append(prefix)
    if not missing_keys and not missing_prefixes:
        return Sufficiency(verdict=Verdict.PASS)
    underivable = sorted(key for key in missing_keys if key not in defaults)
    if underivable or missing_prefixes:
        needs = [f"world_state:{key}" for key in underivable] + [f"world_state:{p}*" for p in missing_prefixes]
        return Sufficiency(verdict=Verdict.CLARIFY, missing=tuple(sorted(needs)))
    return Sufficiency(
        verdict=Verdict.RETRY,
        missing=tuple(f"world_state:{key}" for key in sorted(missing_keys)),
        derived={key: defaults[key] for key in sorted(missing_keys)},
    )
