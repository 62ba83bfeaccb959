"""What the model may say: dialogue, emotion and proposed mutations, all bounded.

The bounds (lengths, counts, enums) are part of the contract: they are what makes
schema-constrained decoding finite.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from loreguard.schemas.base import FrozenModel, Identifier, JsonScalar, SignedUnit, UnitInterval

MAX_DIALOGUE_CHARS = 600
MAX_MUTATIONS = 4
MAX_MUTATION_TEXT = 200


class Emotion(str, Enum):
    NEUTRAL = "neutral"
    HAPPY = "happy"
    SAD = "sad"
    ANGRY = "angry"
    AFRAID = "afraid"
    SURPRISED = "surprised"
    SUSPICIOUS = "suspicious"
    AMUSED = "amused"


MutationText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_MUTATION_TEXT)]


class AppendEpisodicMutation(FrozenModel):
    kind: Literal["append_episodic"] = "append_episodic"
    text: MutationText
    significance: UnitInterval = 0.5


class TransformBeliefMutation(FrozenModel):
    kind: Literal["transform_belief"] = "transform_belief"
    target: Identifier
    content: MutationText
    confidence: UnitInterval = 0.5
    sentiment: SignedUnit = 0.0


class TransformRelationshipMutation(FrozenModel):
    kind: Literal["transform_relationship"] = "transform_relationship"
    #: Who the relationship is with, e.g. "player".
    target: Identifier
    #: Change of affinity, clamped to -1..1 when applied.
    delta: SignedUnit


class EmitWorldIntentMutation(FrozenModel):
    kind: Literal["emit_world_intent"] = "emit_world_intent"
    intent: Identifier
    params: dict[Identifier, JsonScalar] = Field(default_factory=dict, max_length=8)


ProposedMutation = Annotated[
    AppendEpisodicMutation | TransformBeliefMutation | TransformRelationshipMutation | EmitWorldIntentMutation,
    Field(discriminator="kind"),
]


class ParsedOutput(FrozenModel):
    """The model's structured reply after parsing. Still unvalidated: the gate decides."""

    dialogue: Annotated[str, StringConstraints(min_length=1, max_length=MAX_DIALOGUE_CHARS)]
    emotion: Emotion = Emotion.NEUTRAL
    mutations: tuple[ProposedMutation, ...] = Field(default=(), max_length=MAX_MUTATIONS)


class WorldIntent(FrozenModel):
    """An approved request for the game to act (open a door, hand over an item)."""

    type: Identifier
    params: dict[Identifier, JsonScalar] = Field(default_factory=dict)
