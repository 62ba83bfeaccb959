"""The bounded output schema and its grammar: exact bounds, deterministic text, typed refusals."""

from __future__ import annotations

import json

import pytest
from factories import rich_guard_profile

from loreguard.schemas import ParsedOutput
from loreguard.server.pipeline.inference.grammar import UnsupportedSchema, compile_schema
from loreguard.server.pipeline.output_schema import GenerationLimits, output_schema

LIMITS = GenerationLimits()
WIDE = "\U0001f409"  # four UTF-8 bytes: the widest character a string may hold


def _longest_outputs(limits: GenerationLimits) -> list[dict]:
    """The longest instance of each mutation kind, filled to every bound."""
    text = WIDE * limits.mutation_text_chars
    ident = "a" * limits.identifier_chars
    base = {"dialogue": WIDE * limits.dialogue_chars, "emotion": "suspicious"}
    kinds = [
        {"kind": "append_episodic", "text": text, "significance": 0.125},
        {"kind": "transform_belief", "target": ident, "content": text, "confidence": 0.125, "sentiment": -0.125},
        {"kind": "transform_relationship", "target": ident, "delta": -0.125},
        {"kind": "emit_world_intent", "intent": "give_item", "params": {"count": 5, "item": WIDE * 32}},
    ]
    return [{**base, "mutations": [kind] * limits.mutations} for kind in kinds]


def _compact(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def test_every_longest_output_fits_the_bound_and_the_gate_schema() -> None:
    schema = output_schema(rich_guard_profile().allowed_intents, LIMITS)
    grammar = compile_schema(schema)
    for output in _longest_outputs(LIMITS):
        assert len(_compact(output)) <= grammar.max_bytes
        ParsedOutput.model_validate(output)  # the model's widest output is one the gate accepts


def test_bound_is_tight_for_the_widest_output() -> None:
    schema = output_schema((), GenerationLimits(mutations=1))
    longest = max(len(_compact(o)) for o in _longest_outputs(GenerationLimits(mutations=1))[:3])
    # The bound also counts the widest number forms ("-0.125" style): within a few bytes.
    assert 0 <= compile_schema(schema).max_bytes - longest <= 12


def test_grammar_text_is_deterministic_and_keeps_property_order() -> None:
    profile = rich_guard_profile()
    a = compile_schema(output_schema(profile.allowed_intents, LIMITS)).gbnf
    b = compile_schema(output_schema(tuple(reversed(profile.allowed_intents)), LIMITS)).gbnf
    assert a.encode() == b.encode()
    root = a.splitlines()[0]
    assert root.index('"\\"dialogue\\""') < root.index('"\\"emotion\\""') < root.index('"\\"mutations\\""')


def test_strings_exclude_raw_control_characters() -> None:
    gbnf = compile_schema(output_schema((), LIMITS)).gbnf
    assert r'char ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt]' in gbnf


def test_intent_parameters_become_exact_alternatives() -> None:
    gbnf = compile_schema(output_schema(rich_guard_profile().allowed_intents, LIMITS)).gbnf
    assert '"\\"open_gate\\""' in gbnf and '("\\"north\\"" | "\\"south\\"")' in gbnf
    assert '"\\"give_item\\""' in gbnf


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "string"}, "maxLength"),
        ({"type": "array", "items": {"type": "boolean"}}, "maxItems"),
        ({"type": "string", "maxLength": 3, "format": "date"}, "format"),
        ({"type": "string", "maxLength": 3, "pattern": "^a|b$"}, "pattern"),
        ({"type": "null"}, "null"),
        ({"enum": []}, "empty enum"),
    ],
)
def test_unbounded_or_unknown_schemas_are_refused(schema: dict, message: str) -> None:
    with pytest.raises(UnsupportedSchema, match=message):
        compile_schema(schema)


def test_no_mutations_allowed_means_an_empty_list_only() -> None:
    grammar = compile_schema(output_schema((), GenerationLimits(mutations=0)))
    assert '"\\"mutations\\"" ": " "[]"' in grammar.gbnf
