"""Compile a bounded JSON Schema into a llama.cpp GBNF grammar, with its worst-case length.

Only the subset that `output_schema` produces is supported, and anything else is refused with
`UnsupportedSchema` rather than approximated: objects (properties in order, non-required ones
left out), strings with `maxLength` (plus `enum`, `const` and a single character-class
`pattern`), bounded numbers and integers, booleans, arrays with `maxItems`, and `anyOf`/`oneOf`.

The grammar writes compact JSON with the separators of Python's `json.dumps` (", " and ": "),
the same shape the prompt's examples show. Strings admit no raw control characters (the stock
converter lets raw newlines through, which strict JSON refuses).

`max_bytes` is the longest UTF-8 output the grammar accepts. llama.cpp's grammar sampler
rejects tokens with an empty piece, so every accepted token adds at least one byte and
`max_bytes + 1` tokens (the +1 for end-of-generation) always suffice: no output is ever cut off.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


class UnsupportedSchema(ValueError):
    """The schema uses a feature the grammar compiler does not bound."""


@dataclass(frozen=True)
class CompiledGrammar:
    gbnf: str
    #: Longest output, in UTF-8 bytes, that the grammar accepts.
    max_bytes: int

    @property
    def max_tokens(self) -> int:
        return self.max_bytes + 1


#: One JSON string character: anything but a quote, a backslash or a control character, or a
#: short escape. A code point is at most 4 UTF-8 bytes; an escape is 2.
_CHAR_RULE = r'[^"\\\x00-\x1F] | "\\" ["\\/bfnrt]'
_CHAR_MAX_BYTES = 4
_FRACTION_DIGITS = 3
#: Whole-number digits for a number without both bounds.
_UNBOUNDED_DIGITS = 9
_SIMPLE_PATTERN = re.compile(r"^\^(\[[^\]]+\])([+*])\$$")
_KNOWN = {
    "type", "properties", "required", "additionalProperties", "minLength", "maxLength", "enum", "const",
    "pattern", "minimum", "maximum", "items", "maxItems", "minItems", "anyOf", "oneOf", "description", "title",
}  # fmt: skip


def _literal(text: str) -> str:
    """A GBNF string literal matching exactly `text`."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json_literal(value: Any) -> tuple[str, int]:
    text = json.dumps(value, ensure_ascii=False)
    return _literal(text), len(text.encode("utf-8"))


class _Compiler:
    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def rule(self, name: str, body: str) -> str:
        existing = self.rules.get(name)
        if existing is not None and existing != body:
            raise AssertionError(f"grammar rule {name} defined twice differently")
        self.rules[name] = body
        return name

    def compile(self, schema: Any) -> tuple[str, int]:
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"a schema must be an object, not {type(schema).__name__}")
        unknown = sorted(set(schema) - _KNOWN)
        if unknown:
            raise UnsupportedSchema(f"unsupported schema keywords: {', '.join(unknown)}")
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema:
            choices = [_json_literal(v) for v in schema["enum"]]
            if not choices:
                raise UnsupportedSchema("an empty enum accepts nothing")
            return "(" + " | ".join(c[0] for c in choices) + ")", max(c[1] for c in choices)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [self.compile(option) for option in schema[key]]
                if not options:
                    raise UnsupportedSchema(f"an empty {key} accepts nothing")
                return "(" + " | ".join(o[0] for o in options) + ")", max(o[1] for o in options)
        kind = schema.get("type")
        if kind == "object":
            return self._object(schema)
        if kind == "array":
            return self._array(schema)
        if kind == "string":
            return self._string(schema)
        if kind in ("number", "integer"):
            return self._number(schema, integer=kind == "integer")
        if kind == "boolean":
            return '("true" | "false")', 5
        raise UnsupportedSchema(f"unsupported schema type {kind!r}")

    def _object(self, schema: dict[str, Any]) -> tuple[str, int]:
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        parts: list[str] = []
        size = 2
        for index, name in enumerate(n for n in properties if n in required):
            body, body_max = self.compile(properties[name])
            key, key_max = _json_literal(name)
            parts.append(('", " ' if index else "") + f'{key} ": " {body}')
            size += (2 if index else 0) + key_max + 2 + body_max
        return '"{" ' + " ".join(parts) + ' "}"' if parts else '"{}"', size

    def _array(self, schema: dict[str, Any]) -> tuple[str, int]:
        if "maxItems" not in schema:
            raise UnsupportedSchema("arrays need maxItems")
        low, high = int(schema.get("minItems", 0)), int(schema["maxItems"])
        if high == 0:
            return '"[]"', 2
        item, item_max = self.compile(schema.get("items", {}))
        name = self.rule(f"item{len(self.rules)}", item)
        rest = f'(", " {name}){{{max(low - 1, 0)},{high - 1}}}'
        body = f"{name} {rest}"
        if low == 0:
            body = f"({body})?"
        return f'"[" {body} "]"', 2 + high * item_max + (high - 1) * 2

    def _string(self, schema: dict[str, Any]) -> tuple[str, int]:
        if "maxLength" not in schema:
            raise UnsupportedSchema("strings need maxLength")
        low, high = int(schema.get("minLength", 0)), int(schema["maxLength"])
        if "pattern" in schema:
            match = _SIMPLE_PATTERN.match(schema["pattern"])
            if match is None:
                raise UnsupportedSchema(f"only ^[class]+$ or ^[class]*$ patterns are supported, not {schema['pattern']!r}")
            if match.group(1).startswith("[^") or not match.group(1).isascii():
                raise UnsupportedSchema("pattern classes must be ASCII and not negated")
            low = max(low, 1 if match.group(2) == "+" else 0)
            return f'"\\"" {match.group(1)}{{{low},{high}}} "\\""', high + 2
        self.rule("char", _CHAR_RULE)
        return f'"\\"" char{{{low},{high}}} "\\""', high * _CHAR_MAX_BYTES + 2

    def _number(self, schema: dict[str, Any], *, integer: bool) -> tuple[str, int]:
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        signed = minimum is None or minimum < 0
        sign = '"-"? ' if signed else ""
        if not integer and minimum is not None and maximum is not None and minimum >= -1 and maximum <= 1:
            # Unit ranges, the common case (confidence, sentiment): 0, 0.25, 1, -0.5...
            unit = f'("0" ("." [0-9]{{1,{_FRACTION_DIGITS}}})? | "1" (".0")?)'
            return sign + unit, int(signed) + 2 + _FRACTION_DIGITS
        bounds = [abs(v) for v in (minimum, maximum) if v is not None]
        digits = max(1, len(str(math.floor(max(bounds))))) if len(bounds) == 2 else _UNBOUNDED_DIGITS
        whole = f'("0" | [1-9] [0-9]{{0,{digits - 1}}})' if digits > 1 else "[0-9]"
        size = int(signed) + digits
        if integer:
            return sign + whole, size
        return f'{sign}{whole} ("." [0-9]{{1,{_FRACTION_DIGITS}}})?', size + 1 + _FRACTION_DIGITS


def compile_schema(schema: dict[str, Any], *, after_prefix: str = "") -> CompiledGrammar:
    """The GBNF grammar for `schema`, cached by its JSON text.

    Property order is meaningful here (it is the order the model writes them), so the cache key
    keeps it rather than sorting keys.

    With `after_prefix`, the grammar of what may follow that start of an output: a remote
    server applies a grammar to the tokens it generates only, so a continued output (an
    assistant prefill) needs the rest of the language, not all of it. Only starts inside the
    object's first property, a plain string, are supported (`streaming.continuation_prefix`).
    """
    schema_json = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    return _compile_rest(schema_json, after_prefix) if after_prefix else _compile_cached(schema_json, "")


@lru_cache(maxsize=16)  # its own cache: every continued output has a prefix of its own
def _compile_rest(schema_json: str, after_prefix: str) -> CompiledGrammar:
    return _compile_cached.__wrapped__(schema_json, after_prefix)


@lru_cache(maxsize=64)
def _compile_cached(schema_json: str, after_prefix: str) -> CompiledGrammar:
    compiler = _Compiler()
    schema = json.loads(schema_json)
    if after_prefix:
        root, max_bytes = _rest_after(compiler, schema, after_prefix)
    else:
        root, max_bytes = compiler.compile(schema)
    lines = [f"root ::= {root}"] + [f"{name} ::= {body}" for name, body in compiler.rules.items()]
    return CompiledGrammar(gbnf="\n".join(lines) + "\n", max_bytes=max_bytes)


def _rest_after(compiler: _Compiler, schema: dict[str, Any], prefix: str) -> tuple[str, int]:
    """The rest of `schema`'s language after `prefix`: `{"<first>": "` and string characters."""
    required = [n for n in schema.get("properties", {}) if n in set(schema.get("required", ()))]
    first = schema["properties"][required[0]] if schema.get("type") == "object" and required else {}
    opening = "{" + json.dumps(required[0] if required else "") + ': "'
    if first.get("type") != "string" or set(first) & {"pattern", "enum", "const"} or not prefix.startswith(opening):
        raise UnsupportedSchema("a continued output must start inside the object's first property, a plain string")
    try:
        written = json.loads('"' + prefix[len(opening) :] + '"')
    except ValueError as exc:
        raise UnsupportedSchema("the continued output's start is not a valid open JSON string") from exc
    if "maxLength" not in first:
        raise UnsupportedSchema("strings need maxLength")
    low, high = int(first.get("minLength", 0)), int(first["maxLength"])
    if len(written) > high:
        raise UnsupportedSchema(f"the continued output's start is longer than {high} characters")
    rest = {**schema, "properties": {n: schema["properties"][n] for n in required[1:]}, "required": required[1:]}
    body, body_max = compiler.compile(rest)  # '"{" ... "}"' for the properties after the first
    compiler.rule("char", _CHAR_RULE)
    tail = body[len('"{" ') : -len(' "}"')] if len(required) > 1 else ""
    left = high - len(written)
    root = f'char{{{max(low - len(written), 0)},{left}}} "\\""' + (f' ", " {tail}' if tail else "") + ' "}"'
    return root, left * _CHAR_MAX_BYTES + 1 + (body_max - 2 + 2 if tail else 0) + 1
