"""What the model may emit for one NPC, as a bounded JSON Schema.

`ParsedOutput` is the widest output the gate accepts. The schema sent to the model is narrower:
shorter strings, fewer mutations, and the world intent one `intent` property after the dialogue:
"none", or one of the intents offered this turn (`intents`) with its parameters, those the
player's line fixed as constants; where the rules granted a request (`deals`), that request and
nothing else. The dialogue comes first (streaming releases it as it grows),
so the intent is chosen knowing what the NPC said. Every string, number and array is bounded, so constrained decoding always
finishes; the grammar compiled from it knows the longest output it allows, which bounds the
tokens a backend can spend. Properties are listed in the order they must be written.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.npc import IntentParam, ParamType
from loreguard.schemas.output import MAX_DIALOGUE_CHARS, MAX_MUTATION_TEXT, MAX_MUTATIONS, NO_INTENT, Emotion
from loreguard.server.pipeline.turn.intents import OfferedIntent

#: Identifiers the model writes (belief ids, relationship targets): a safe subset of `Identifier`.
IDENTIFIER_PATTERN = "^[a-z0-9_]+$"


class GenerationLimits(FrozenModel):
    """Bounds for generation, tighter than the gate's: they cap worst-case decode time."""

    dialogue_chars: int = Field(default=160, ge=1, le=MAX_DIALOGUE_CHARS)
    mutations: int = Field(default=2, ge=0, le=MAX_MUTATIONS)
    mutation_text_chars: int = Field(default=120, ge=1, le=MAX_MUTATION_TEXT)
    identifier_chars: int = Field(default=24, ge=1, le=64)


def _string(max_length: int, min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": max_length}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _unit(minimum: float) -> dict[str, Any]:
    return {"type": "number", "minimum": minimum, "maximum": 1}


def _param_schema(param: IntentParam) -> dict[str, Any]:
    if param.enum:
        return {"type": "string", "enum": list(param.enum)}
    if param.type is ParamType.STRING:
        return _string(param.max_length)
    if param.type is ParamType.BOOLEAN:
        return {"type": "boolean"}
    schema: dict[str, Any] = {"type": param.type.value}
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    if param.maximum is not None:
        schema["maximum"] = param.maximum
    return schema


def _offer_schema(offer: OfferedIntent) -> dict[str, Any]:
    fixed = dict(offer.params)
    params = {
        name: ({"const": fixed[name]} if name in fixed else _param_schema(offer.spec.params[name]))
        for name in sorted(offer.spec.params)
    }
    return _object({"type": {"const": offer.spec.type}, "params": _object(params)})


def output_schema(offered: tuple[OfferedIntent, ...], limits: GenerationLimits) -> dict[str, Any]:
    """The bounded schema for one turn: `intent` is "none" or one of the `offered` intents (see
    `intents`). Memoised per tuple of offer objects and limits (frozen), so the dict may be
    shared: read it, never change it. (Offers are made anew each turn; the grammar compiled
    from the schema is cached by its text, which is what costs.)"""
    return _SCHEMAS.get((limits, *offered), lambda: _output_schema(offered, limits))


_SCHEMAS: IdentityMemo[dict[str, Any]] = IdentityMemo(maxsize=256)


def _output_schema(offered: tuple[OfferedIntent, ...], limits: GenerationLimits) -> dict[str, Any]:
    ident = {"type": "string", "pattern": IDENTIFIER_PATTERN, "minLength": 1, "maxLength": limits.identifier_chars}
    text = _string(limits.mutation_text_chars)
    mutations = [
        _object({"kind": {"const": "append_episodic"}, "text": text, "significance": _unit(0)}),
        _object(
            {
                "kind": {"const": "transform_belief"},
                "target": ident,
                "content": text,
                "confidence": _unit(0),
                "sentiment": _unit(-1),
            }
        ),
        _object({"kind": {"const": "transform_relationship"}, "target": ident, "delta": _unit(-1)}),
    ]
    intent: dict[str, Any] = {"const": NO_INTENT}
    decided = [offer for offer in offered if offer.decided]
    if decided:  # the rules made the sale: the output grants it, and nothing else
        intent = _offer_schema(decided[0]) if len(decided) == 1 else {"anyOf": [_offer_schema(o) for o in decided]}
    elif offered:
        intent = {"anyOf": [intent, *(_offer_schema(offer) for offer in offered)]}
    return _object(
        {
            "dialogue": _string(limits.dialogue_chars),
            "intent": intent,
            "emotion": {"type": "string", "enum": [e.value for e in Emotion]},
            # a granted intent joins the mutations when parsed: room is kept for it
            "mutations": {"type": "array", "items": {"anyOf": mutations}, "maxItems": min(limits.mutations, MAX_MUTATIONS - 1)},
        }
    )
