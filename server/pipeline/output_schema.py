"""What the model may emit for one NPC, as a bounded JSON Schema.

`ParsedOutput` is the widest output the gate accepts. The schema sent to the model is narrower:
shorter strings, fewer mutations, and world intents restricted to the NPC's allowed intents with
their exact parameters. Every string, number and array is bounded, so constrained decoding always
finishes; `schema_max_chars` gives the longest output the schema allows, which bounds the tokens
a backend can spend. Properties are listed in the order they must be written.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from loreguard.memory.memo import IdentityMemo
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.npc import IntentParam, IntentSpec, ParamType
from loreguard.schemas.output import MAX_DIALOGUE_CHARS, MAX_MUTATION_TEXT, MAX_MUTATIONS, Emotion

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


def _intent_schema(spec: IntentSpec) -> dict[str, Any]:
    params = {name: _param_schema(spec.params[name]) for name in sorted(spec.params)}
    return _object({"kind": {"const": "emit_world_intent"}, "intent": {"const": spec.type}, "params": _object(params)})


def output_schema(intents: tuple[IntentSpec, ...] | list[IntentSpec], limits: GenerationLimits) -> dict[str, Any]:
    """The bounded schema for an NPC with these allowed intents. Built once per set of intent
    and limit objects (they are frozen; every interaction of an NPC asks with the same ones), so
    the dict is shared: read it, never change it."""
    return _SCHEMAS.get((limits, *intents), lambda: _output_schema(intents, limits))


_SCHEMAS: IdentityMemo[dict[str, Any]] = IdentityMemo(maxsize=256)


def _output_schema(intents: tuple[IntentSpec, ...] | list[IntentSpec], limits: GenerationLimits) -> dict[str, Any]:
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
    ] + [_intent_schema(spec) for spec in sorted(intents, key=lambda s: s.type)]
    return _object(
        {
            "dialogue": _string(limits.dialogue_chars),
            "emotion": {"type": "string", "enum": [e.value for e in Emotion]},
            "mutations": {"type": "array", "items": {"anyOf": mutations}, "maxItems": limits.mutations},
        }
    )
