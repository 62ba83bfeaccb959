"""Designer expectancy rules and the constraints they produce."""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from loreguard.schemas.base import FrozenModel, Identifier, JsonScalar, ShortText, StateKey
from loreguard.schemas.interaction import Tag, TaskType, TriggerReason
from loreguard.schemas.output import Emotion
from loreguard.schemas.text import matchable


class RuleType(str, Enum):
    PERMISSION = "permission"
    PROHIBITION = "prohibition"
    REQUIREMENT = "requirement"


class Severity(str, Enum):
    """soft: retried, accepted with a warning on the last attempt; hard: retried, then fallback;
    critical: fallback at once, no retry."""

    SOFT = "soft"
    HARD = "hard"
    CRITICAL = "critical"


SEVERITY_RANK: dict[Severity, int] = {Severity.SOFT: 0, Severity.HARD: 1, Severity.CRITICAL: 2}
RULE_TYPE_RANK: dict[RuleType, int] = {RuleType.PROHIBITION: 0, RuleType.REQUIREMENT: 1, RuleType.PERMISSION: 2}

#: A phrase a check matches (whole words, after folding); one that folds to no word is refused.
Phrase = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(matchable)]
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=300)]


class RuleConditions(FrozenModel):
    """When a rule applies. An empty list means "any"; all given conditions must hold."""

    trigger_reasons: tuple[TriggerReason, ...] = ()
    #: The interaction's task type as the sidecar classifies it (e.g. only while trading).
    task_types: tuple[TaskType, ...] = ()
    npc_ids: tuple[Identifier, ...] = ()
    scenes: tuple[Annotated[str, StringConstraints(max_length=128)], ...] = ()
    tags_any: tuple[Tag, ...] = ()
    tags_all: tuple[Tag, ...] = ()
    min_interaction: int | None = Field(default=None, ge=0)
    max_interaction: int | None = Field(default=None, ge=0)
    #: World-state keys and the values they must have (NPC scope first, then world scope).
    #: A key the game never set makes the context insufficient rather than silently false.
    world_state: dict[StateKey, JsonScalar] = Field(default_factory=dict)


class RuleChecks(FrozenModel):
    """What a machine can verify on an output. Phrases match case-insensitively on
    normalised text; patterns are Python regular expressions (case-insensitive)."""

    forbidden_phrases: tuple[Phrase, ...] = ()
    forbidden_patterns: tuple[Pattern, ...] = ()
    required_phrases: tuple[Phrase, ...] = ()
    required_patterns: tuple[Pattern, ...] = ()
    max_length: int | None = Field(default=None, ge=1)
    forbidden_intents: tuple[Identifier, ...] = ()
    required_intents: tuple[Identifier, ...] = ()
    forbidden_emotions: tuple[Emotion, ...] = ()
    #: Words that make a player's request one the rule forbids ("for free", "on credit"): a
    #: request worded in one is not offered to the model, and the prompt says which rule refuses
    #: it (text/request_terms.py). Prohibitions only. One also in `forbidden_phrases`
    #: may be said to refuse ("Not for free."), a negation before it in its clause.
    forbidden_requests: tuple[Phrase, ...] = ()

    @field_validator("forbidden_patterns", "required_patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        return patterns


class ExpectancyRule(FrozenModel):
    """A designer rule: when `conditions` hold, inject `prompt_injection` and enforce `checks`."""

    id: Identifier
    type: RuleType
    severity: Severity = Severity.HARD
    description: ShortText = ""
    prompt_injection: ShortText = ""
    conditions: RuleConditions = RuleConditions()
    checks: RuleChecks = RuleChecks()
    priority: int = Field(default=0, ge=-1000, le=1000)
    #: Behavioural rules shape style only, never truth: they are soft, carry only a prompt
    #: injection and style checks, and apply only once designer feedback makes them confident.
    behavioural: bool = False

    @model_validator(mode="after")
    def _means_what_it_says(self) -> ExpectancyRule:
        # Here, not on a container, so every path that accepts a rule (npc.register,
        # world.load, a rule set) refuses the same thing the same way.
        if self.behavioural and self.severity is not Severity.SOFT:
            raise ValueError(
                f"behavioural rule {self.id!r} must be soft, not {self.severity.value}: it shapes style, never truth"
            )
        if self.checks.forbidden_requests and self.type is not RuleType.PROHIBITION:
            raise ValueError(
                f"{self.type.value} rule {self.id!r} cannot carry checks.forbidden_requests: only a prohibition forbids a request"
            )
        if self.type is RuleType.PERMISSION:
            given = sorted(self.checks.model_dump(exclude_defaults=True))
            if given:
                raise ValueError(
                    f"permission rule {self.id!r} cannot carry checks ({', '.join('checks.' + g for g in given)}): "
                    "a permission only tells the model what it may do and never fails a reply; "
                    "make it a prohibition or a requirement"
                )
        return self


class RuleSet(FrozenModel):
    id: Identifier
    rules: tuple[ExpectancyRule, ...] = Field(default=(), max_length=512)

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: tuple[ExpectancyRule, ...]) -> tuple[ExpectancyRule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"duplicate rule id {rule.id!r}")
            seen.add(rule.id)
        return rules


class Constraint(FrozenModel):
    """One active rule for one interaction, as the prompt and the gate see it."""

    rule_id: Identifier
    type: RuleType
    severity: Severity
    text: ShortText
    checks: RuleChecks
    priority: int = 0
    #: 0 for a rule as written; raised by retry escalation.
    escalation: int = 0
    behavioural: bool = False


class BehaviourStats(FrozenModel):
    """Designer feedback on a behavioural rule: a Beta-Binomial posterior with a skeptical
    prior (alpha=2, beta=5)."""

    rule_id: Identifier
    positive: int = Field(default=0, ge=0)
    negative: int = Field(default=0, ge=0)
