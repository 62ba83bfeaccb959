"""Tunable memory limits. Decay counts interactions, never wall-clock time."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import EpisodicEntry


class MemoryPolicy(FrozenModel):
    #: Episodic entries kept per NPC; past this the weakest are pruned.
    episodic_limit: int = Field(default=256, ge=1, le=100_000)
    #: Strength multiplier per interaction since an entry was written.
    episodic_decay: float = Field(default=0.97, gt=0.0, le=1.0)


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
