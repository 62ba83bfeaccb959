"""What the model may say: dialogue, emotion and proposed mutations, all bounded.

The bounds (lengths, counts, enums) are part of the contract: they are what makes
schema-constrained decoding finite.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer, model_validator

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


#: The output's `intent` when the reply grants none.
NO_INTENT = "none"


class ParsedOutput(FrozenModel):
    """The model's structured reply after parsing. Still unvalidated: the gate decides.

    The model writes the world intent it grants as `intent` after the dialogue: "none", or
    {"type": ..., "params": {...}}. Parsed, it is the first of the mutations (an
    `EmitWorldIntentMutation`); an output may also list intents among its mutations, as a
    backend without the output grammar may."""

    dialogue: Annotated[str, StringConstraints(min_length=1, max_length=MAX_DIALOGUE_CHARS)]
    emotion: Emotion = Emotion.NEUTRAL
    mutations: tuple[ProposedMutation, ...] = Field(default=(), max_length=MAX_MUTATIONS)

    @model_validator(mode="before")
    @classmethod
    def _intent_is_the_first_mutation(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "intent" not in data:
            return data
        data = dict(data)
        value = data.pop("intent")
        if value == NO_INTENT or value is None:
            return data
        if not isinstance(value, dict) or not isinstance(value.get("type"), str) or set(value) - {"type", "params"}:
            raise ValueError('intent must be "none" or {"type": ..., "params": {...}}')
        mutations = data.get("mutations", [])
        if isinstance(mutations, (list, tuple)):
            granted = {"kind": "emit_world_intent", "intent": value["type"], "params": value.get("params", {})}
            data["mutations"] = [granted, *mutations]
        return data

    @property
    def grants(self) -> bool:
        """Whether the output grants a world intent (its `intent`, or one among its mutations)."""
        return any(isinstance(m, EmitWorldIntentMutation) for m in self.mutations)


class Payment(FrozenModel):
    """What the player pays for a sale the rules decided (`IntentSpec.wares`): the game takes it
    from the purse when it hands the wares over."""

    #: The price of all of it, in `currency` (unit price times count).
    amount: int = Field(ge=0)
    currency: Identifier
    #: The same in the world's smallest currency (`Economy.currencies`): what leaves the purse.
    value: int = Field(ge=0)


class WorldIntent(FrozenModel):
    """An approved request for the game to act (open a door, hand over an item)."""

    type: Identifier
    params: dict[Identifier, JsonScalar] = Field(default_factory=dict)
    #: For a sale the rules decided: what it costs the player. Absent otherwise.
    payment: Payment | None = None

    @model_serializer(mode="wrap")
    def _without_no_payment(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An intent with no payment reads as it did before payments: records and hashes made
        # then replay byte for byte.
        data: dict[str, Any] = handler(self)
        if data.get("payment") is None:
            data.pop("payment", None)
        return data

    def same_act(self, other: WorldIntent) -> bool:
        """Whether both ask the game for the same act (type and parameters; payment aside)."""
        return self.type == other.type and self.params == other.params
