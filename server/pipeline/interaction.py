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
