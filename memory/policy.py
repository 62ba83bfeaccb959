"""Tunable memory limits. Decay counts interactions, never wall-clock time."""

from __future__ import annotations

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
