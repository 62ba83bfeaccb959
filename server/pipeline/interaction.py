"""Stage 1: intake of the InteractionContext.

The context is untrusted: it selects memory and rules but never grants authority. Intake
cleans the player's text and pins the interaction to the sidecar's own count for this NPC, which
also seeds the model: the game's `interaction_count` is informational only.
"""

from __future__ import annotations

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.interaction import InteractionContext
from loreguard.text.phrases import clean_dialogue


class Intake(FrozenModel):
    context: InteractionContext
    #: The sidecar's count of completed interactions for this NPC before this one.
    interaction_index: int
    seed: int


def seed_for(game_seed: int | None, interaction_index: int) -> int:
    """The model's seed for an interaction: its index alone, or (a game seed set) the index mixed
    with the game's seed, a 32-bit value (SplitMix-style, so nearby games do not share lines)."""
    if game_seed is None:
        return interaction_index
    z = (game_seed * 0x9E3779B97F4A7C15 + interaction_index) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFF


def intake(context: InteractionContext, interaction_index: int, seed: int | None = None) -> Intake:
    """Normalise the untrusted context; the seed defaults to the interaction index."""
    cleaned = context.model_copy(
        update={
            "player_input": clean_dialogue(context.player_input),
            "trigger_prompt": clean_dialogue(context.trigger_prompt),
            "tags": tuple(sorted(set(context.tags))),
        }
    )
    return Intake(context=cleaned, interaction_index=interaction_index, seed=interaction_index if seed is None else seed)
