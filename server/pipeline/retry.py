"""Retry policy: escalate constraints and tell the model what to repair.

Escalation modes:
* none: retry with the same constraints;
* add_specific_prohibition: add a hard prohibition naming exactly what was wrong, one for every
  failure with evidence (its id is derived from the failure's content: see `retry_rule_id`);
* harden_requirements: every requirement is emphasised, and a failed soft requirement becomes
  hard (soft prohibitions stay soft: on the last attempt they bend, with a warning);
* full: both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum

from pydantic import Field

from loreguard.memory.hashing import content_hash
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


#: Characters an Identifier may not hold; a failure's rule id is free text (`world_state:KEY`).
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_.:\-]")
_RETRY_DIGEST_CHARS = 12
#: What every retry rule's id starts with (`retry_rule_id`).
RETRY_RULE_PREFIX = "retry."
_IDENTIFIER_MAX = 64


def retry_rule_id(failure: GateFailure) -> str:
    """The id of the prohibition a failure escalates to: `retry.<rule or gate>.<digest>`, the
    digest a hash of (gate, rule id, evidence). Two failures of one attempt get two ids whenever
    they differ in any of these (two forbidden phrases of one rule, two rejected claims about one
    fact), so neither replaces the other; the same failure on a later attempt gets the same id and
    is said once."""
    digest = content_hash([failure.gate.value, failure.rule_id or "", failure.evidence or ""])[:_RETRY_DIGEST_CHARS]
    name = _NOT_IDENTIFIER.sub("_", failure.rule_id or failure.gate.value)
    head = f"{RETRY_RULE_PREFIX}{name}"[: _IDENTIFIER_MAX - _RETRY_DIGEST_CHARS - 1]
    return f"{head}.{digest}"


def is_retry_rule(c: Constraint) -> bool:
    """Whether `c` is a retry's own prohibition (it quotes a rejected reply), not a designer's."""
    return c.rule_id.startswith(RETRY_RULE_PREFIX)


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
                        rule_id=retry_rule_id(f),
                        type=RuleType.PROHIBITION,
                        severity=Severity.HARD,
                        text=f'say "{f.evidence}" or anything like it',
                        checks=RuleChecks(),
                        escalation=1,
                    )
                )
    return ConstraintSet.of(items)


#: The repair message's first and last lines (the gate knows them: a reply that reads them out
#: is the model saying its instructions, see `readout`).
REPAIR_OPENING = "Your previous reply was rejected:"
REPAIR_CLOSING = "Write a new reply that follows every rule, as one JSON object."


def repair_message(failures: Iterable[GateFailure]) -> str:
    """One line per failure, naming the violated constraint: the model's repair instructions."""
    lines = [REPAIR_OPENING]
    for f in failures:
        name = f" ({f.rule_id})" if f.rule_id and f.gate is not GateName.KNOWLEDGE else ""
        lines.append(f"- {f.gate.value}{name}: {f.reason}")
    lines.append(REPAIR_CLOSING)
    return "\n".join(lines)
