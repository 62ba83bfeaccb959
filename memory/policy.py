"""Tunable memory limits. Decay counts interactions, never wall-clock time."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, model_validator

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import EpisodicEntry


class MemoryPolicy(FrozenModel):
    #: Episodic entries an NPC's long-term memory holds (conversation exchanges and notes); past
    #: this its oldest are consolidated (`consolidation`). The prompt shows a few of them
    #: (`NpcBounds.max_episodic`), chosen by retrieval.
    episodic_limit: int = Field(default=512, ge=1, le=100_000)
    #: Strength multiplier per interaction since an entry was written (the forgetting curve
    #: retrieval's recency follows).
    episodic_decay: float = Field(default=0.97, gt=0.0, le=1.0)
    #: How many of the oldest entries one consolidation looks at (default: half the limit)...
    consolidate_oldest: int | None = Field(default=None, ge=1, le=100_000)
    #: ...and how many of them it keeps, the most significant (default: all but a quarter of the
    #: limit, so a memory worth keeping competes with many, and room frees in steps).
    consolidate_keep: int | None = Field(default=None, ge=0, le=100_000)

    @property
    def consolidation_block(self) -> int:
        if self.consolidate_oldest is not None:
            return self.consolidate_oldest
        return min(self.episodic_limit, max(2, self.episodic_limit // 2))

    @property
    def consolidation_keep(self) -> int:
        if self.consolidate_keep is not None:
            return self.consolidate_keep
        return max(0, min(self.consolidation_block - 1, self.consolidation_block - max(1, self.episodic_limit // 4)))

    @model_validator(mode="after")
    def _frees_room(self) -> MemoryPolicy:
        if self.consolidation_keep >= self.consolidation_block:
            raise ValueError(
                f"consolidate_keep ({self.consolidation_keep}) must be below consolidate_oldest ({self.consolidation_block}):"
                " a consolidation that keeps everything it looks at frees nothing"
            )
        if self.consolidation_block > self.episodic_limit:
            raise ValueError(
                f"consolidate_oldest ({self.consolidation_block}) must be at most episodic_limit ({self.episodic_limit})"
            )
        return self


def episodic_strength(entry: EpisodicEntry, now_interaction: int, decay: float) -> float:
    """significance × decay^(interactions since written). Entries 'from the future' (a loaded
    save of a later game) count as fresh."""
    age = max(0, now_interaction - entry.at_interaction)
    return entry.significance * decay**age


def episodic_strengths(entries: Sequence[EpisodicEntry], now_interaction: int, decay: float) -> list[float]:
    """`episodic_strength` of every entry, in order: the same arithmetic, without a call per
    entry (pruning ranks a whole scope on every append once memory is full)."""
    # The age as `max(0, ...)` computes it, without a call per entry.
    return [
        e.significance * decay ** (now_interaction - e.at_interaction if e.at_interaction < now_interaction else 0)
        for e in entries
    ]
