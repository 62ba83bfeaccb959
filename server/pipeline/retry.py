"""Retry policy: escalate constraints and tell the model what to repair.

Escalation modes:
* none: retry with the same constraints;
* add_specific_prohibition: add a hard prohibition naming exactly what was wrong;
* harden_requirements: every requirement is emphasised, and a failed soft requirement becomes
  hard (soft prohibitions stay soft: on the last attempt they bend, with a warning);
* full: both.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.receipt import GateFailure, GateName
from loreguard.schemas.rules import Constraint, RuleChecks, RuleType, Severity
from loreguard.server.pipeline.expectancy import ConstraintSet


class EscalationMode(str, Enum):
    NONE = "none"
    ADD_SPECIFIC_PROHIBITION = "add_specific_prohibition"
    HARDEN_REQUIREMENTS = "harden_requirements"
    FULL = "full"


class RetryPolicy(FrozenModel):
    max_attempts: int = Field(default=3, ge=1, le=10)
    escalation: EscalationMode = EscalationMode.FULL
    #: Wall-clock budget for all attempts of one interaction; past it, the fallback answers.
    time_budget_ms: int = Field(default=30_000, ge=1)


#: Gates whose evidence may be repeated to the model. Knowledge-gate evidence never is: a
#: repair message must not teach the model the secret.
_REPEATABLE_EVIDENCE = {GateName.CONSTRAINTS, GateName.HARD_LIMITS, GateName.CANONICAL, GateName.GROUNDING, GateName.SEMANTIC}


def escalate(constraints: ConstraintSet, failures: Iterable[GateFailure], mode: EscalationMode) -> ConstraintSet:
    failures = list(failures)
    if mode is EscalationMode.NONE:
        return constraints
    items = list(constraints.constraints)
    if mode in (EscalationMode.HARDEN_REQUIREMENTS, EscalationMode.FULL):
        failed_ids = {f.rule_id for f in failures if f.rule_id}
        hardened = []
        for c in items:
            if c.rule_id in failed_ids or c.type is RuleType.REQUIREMENT:
                harden = c.type is RuleType.REQUIREMENT and c.severity is Severity.SOFT and c.rule_id in failed_ids
                severity = Severity.HARD if harden else c.severity
                c = c.model_copy(update={"severity": severity, "escalation": c.escalation + 1})
            hardened.append(c)
        items = hardened
    if mode in (EscalationMode.ADD_SPECIFIC_PROHIBITION, EscalationMode.FULL):
        for f in failures:
            if f.evidence and f.gate in _REPEATABLE_EVIDENCE:
                # Prompt text only: the rule or fact that failed still enforces itself.
                items.append(
                    Constraint(
                        rule_id=f"retry.{f.rule_id or f.gate.value}",
                        type=RuleType.PROHIBITION,
                        severity=Severity.HARD,
                        text=f'say "{f.evidence}" or anything like it',
                        checks=RuleChecks(),
                        escalation=1,
                    )
                )
    return ConstraintSet.of(items)


def repair_message(failures: Iterable[GateFailure]) -> str:
    """One line per failure, naming the violated constraint: the model's repair instructions."""
    lines = ["Your previous reply was rejected:"]
    for f in failures:
        name = f" ({f.rule_id})" if f.rule_id and f.gate is not GateName.KNOWLEDGE else ""
        lines.append(f"- {f.gate.value}{name}: {f.reason}")
    lines.append("Write a new reply that follows every rule, as one JSON object.")
    return "\n".join(lines)
