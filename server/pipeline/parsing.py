"""Stage 7a: structured parse of the model's text.

Strict JSON first. Failing that, a tolerant extraction: code fences and leading or trailing
prose are removed, the first balanced JSON object that parses is taken, and raw control characters inside
strings (which some grammar-constrained decoders let through) are escaped. The result says
which path parsed it; schema validation is the gate's job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.receipt import ParsePath


class ParseResult(FrozenModel):
    path: ParsePath
    data: dict[str, Any] | None = None
    error: str = ""


#: How many opening braces the tolerant path starts from before giving up: bounds the work on
#: adversarial text full of braces to MAX_STARTS passes over the text.
MAX_STARTS = 32


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, bool]]:
    """(index, character, inside a JSON string literal) for text[start:]; quotes count as
    inside, escapes are honoured."""
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            yield i, ch, True
        else:
            in_string = ch == '"'
            yield i, ch, in_string


def _balanced_objects(text: str) -> Iterator[str]:
    """Balanced {...} spans in `text`, from left to right, braces inside strings ignored."""
    start, starts = text.find("{"), 0
    while start != -1 and starts < MAX_STARTS:
        starts += 1
        depth = 0
        for i, ch, inside in _scan(text, start):
            if inside:
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    yield text[start : i + 1]
                    break
        start = text.find("{", start + 1)


_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_controls_in_strings(text: str) -> str:
    return "".join(
        (_CONTROL_ESCAPES.get(ch) or f"\\u{ord(ch):04x}") if inside and ch < " " else ch for _, ch, inside in _scan(text)
    )


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_output(raw: str) -> ParseResult:
    strict = _loads_object(raw.strip())
    if strict is not None:
        return ParseResult(path=ParsePath.STRICT, data=strict)
    for candidate in _balanced_objects(raw):
        tolerant = _loads_object(_escape_controls_in_strings(candidate))
        if tolerant is not None:
            return ParseResult(path=ParsePath.TOLERANT, data=tolerant)
    return ParseResult(path=ParsePath.FAILED, error="no JSON object found in the model output")
