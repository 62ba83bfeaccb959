"""The bounded output schema and its grammar: exact bounds, deterministic text, typed refusals."""

from __future__ import annotations

import json

import pytest
from factories import rich_guard_profile

from loreguard.schemas import ParsedOutput
from loreguard.schemas.npc import IntentSpec
from loreguard.server.inference.grammar import UnsupportedSchema, compile_schema
from loreguard.server.pipeline.turn.intents import OfferedIntent, offered_intents
from loreguard.server.pipeline.turn.output_schema import GenerationLimits, output_schema

#: An intent given on request only.
OPEN_GATE = {
    "type": "open_gate",
    "params": {"gate_id": {"type": "string", "enum": ["north", "south"]}},
    "cues": ["open the gate", "open the south gate", "open the north gate"],
}

LIMITS = GenerationLimits()
WIDE = "\U0001f409"  # four UTF-8 bytes: the widest character a string may hold


def _longest_outputs(limits: GenerationLimits, intent: object = "none") -> list[dict]:
    """The longest instance of each mutation kind, filled to every bound, granting `intent`."""
    text = WIDE * limits.mutation_text_chars
    ident = "a" * limits.identifier_chars
    kinds = [
        {"kind": "append_episodic", "text": text, "significance": 0.125},
        {"kind": "transform_belief", "target": ident, "content": text, "confidence": 0.125, "sentiment": -0.125},
        {"kind": "transform_relationship", "target": ident, "delta": -0.125},
    ]
    return [
        {
            "dialogue": WIDE * limits.dialogue_chars,
            "intent": intent,
            "emotion": "suspicious",
            "mutations": [kind] * limits.mutations,
        }
        for kind in kinds
    ]


def _offers(player_input: str = "") -> tuple[OfferedIntent, ...]:
    return offered_intents(player_input, rich_guard_profile().allowed_intents)


def _compact(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def test_every_longest_output_fits_the_bound_and_the_gate_schema() -> None:
    grammar = compile_schema(output_schema(_offers(), LIMITS))
    widest_intent = {"type": "give_item", "params": {"count": 5, "item": WIDE * 32}}
    for output in _longest_outputs(LIMITS, widest_intent) + _longest_outputs(LIMITS):
        assert len(_compact(output)) <= grammar.max_bytes
        ParsedOutput.model_validate(output)  # the model's widest output is one the gate accepts


def test_bound_is_tight_for_the_widest_output() -> None:
    schema = output_schema((), GenerationLimits(mutations=1))
    longest = max(len(_compact(o)) for o in _longest_outputs(GenerationLimits(mutations=1))[:3])
    # The bound also counts the widest number forms ("-0.125" style): within a few bytes.
    assert 0 <= compile_schema(schema).max_bytes - longest <= 12


def test_grammar_text_is_deterministic_and_keeps_property_order() -> None:
    profile = rich_guard_profile()
    a = compile_schema(output_schema(offered_intents("", profile.allowed_intents), LIMITS)).gbnf
    b = compile_schema(output_schema(offered_intents("", tuple(reversed(profile.allowed_intents))), LIMITS)).gbnf
    assert a.encode() == b.encode()
    root = a.splitlines()[0]
    order = ('"\\"dialogue\\""', '"\\"intent\\""', '"\\"emotion\\""', '"\\"mutations\\""')
    assert [root.index(key) for key in order] == sorted(root.index(key) for key in order)


def test_strings_exclude_raw_control_characters() -> None:
    gbnf = compile_schema(output_schema((), LIMITS)).gbnf
    assert r'char ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt]' in gbnf


def test_intent_parameters_become_exact_alternatives() -> None:
    gbnf = compile_schema(output_schema(_offers(), LIMITS)).gbnf
    assert '"\\"open_gate\\""' in gbnf and '("\\"north\\"" | "\\"south\\"")' in gbnf
    assert '"\\"give_item\\""' in gbnf


def test_a_requested_intent_is_offered_with_the_parameters_the_line_fixed() -> None:
    specs = (IntentSpec.model_validate(OPEN_GATE),)
    gbnf = compile_schema(output_schema(offered_intents("Open the south gate, please.", specs), LIMITS)).gbnf
    assert '"\\"south\\""' in gbnf and '"\\"north\\""' not in gbnf  # only what was asked for
    assert '"\\"none\\""' in gbnf  # and the refusal
    nothing = compile_schema(output_schema(offered_intents("Nice weather.", specs), LIMITS)).gbnf
    assert '"\\"open_gate\\""' not in nothing and '"\\"intent\\"" ": " "\\"none\\""' in nothing


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


def test_the_rest_after_a_continued_start_is_the_rest_of_the_language_and_its_bound() -> None:
    from loreguard.server.pipeline.running.streaming import continuation_prefix

    schema = output_schema(_offers(), LIMITS)
    whole = compile_schema(schema)
    prefix = continuation_prefix('Halt! "Who" goes')
    rest = compile_schema(schema, after_prefix=prefix)
    written = len('Halt! "Who" goes')
    # The dialogue goes on for at most what its bound leaves, closes, and the object follows.
    assert rest.gbnf.startswith(f'root ::= char{{0,{LIMITS.dialogue_chars - written}}} "\\"" ", " "\\"intent\\""')
    # Exactly the opening and the written characters (each bounded at 4 bytes) less.
    assert whole.max_bytes - rest.max_bytes == len('{"dialogue": "') + 4 * written
    for bad in ('{"dialogue": "Halt\\', '{"dialogue": "Ha\\u00', '{"emotion": "', '{"dialogue": "' + "a" * 999):
        with pytest.raises(UnsupportedSchema):
            compile_schema(schema, after_prefix=bad)
