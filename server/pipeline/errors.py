"""Typed errors of the governance pipeline."""

from __future__ import annotations

from loreguard.schemas.receipt import CancelledBy


class PipelineError(Exception):
    """Base class of every pipeline error."""


class UnknownNpcError(PipelineError, LookupError):
    """The interaction names an NPC that was never registered."""


class LifecycleHalt(PipelineError):
    """An invariant broke. The interaction stops here: nothing is applied, nothing is hidden."""

    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(f"HALT in phase {phase}: {reason}")
        self.phase = phase
        self.reason = reason
        #: The audit record of the halted interaction, when the pipeline has a recorder.
        self.audit_record_id: str | None = None


class DeadlineExceeded(PipelineError):
    """The caller's deadline passed before the interaction could commit; nothing was applied."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"deadline passed before phase {phase}; nothing was applied")
        self.phase = phase


class ConstraintIdCollision(PipelineError, ValueError):
    """Two different constraints share one rule id (a world rule and an NPC rule registered
    around `npc.register`'s check): neither may silently replace the other."""

    def __init__(self, rule_id: str) -> None:
        super().__init__(f"two different rules share the id {rule_id!r}; rule ids must be unique across a world and its NPCs")
        self.rule_id = rule_id


class InteractionCancelled(PipelineError):
    """The interaction was cancelled before it committed (`running.cancel`: the game, the scene's
    end, a streaming client that left): generation stopped, nothing was applied; the audit
    record says so."""

    def __init__(self, phase: str, by: CancelledBy = "client_left") -> None:
        super().__init__(f"cancelled ({by}) before phase {phase}; generation stopped, nothing was applied")
        self.phase = phase
        self.by = by
        #: The audit record of the cancelled interaction, when the pipeline has a recorder.
        self.audit_record_id: str | None = None
