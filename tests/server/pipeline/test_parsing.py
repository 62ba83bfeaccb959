"""Stage 7a: strict parse first, then tolerant extraction; the path is recorded."""

from __future__ import annotations

import pytest

from loreguard.schemas import ParsePath
from loreguard.server.pipeline.parsing import parse_output


def test_strict() -> None:
    result = parse_output('  {"dialogue": "Hi", "emotion": "happy"} ')
    assert result.path is ParsePath.STRICT and result.data == {"dialogue": "Hi", "emotion": "happy"}


@pytest.mark.parametrize(
    "raw",
    [
        '```json\n{"dialogue": "Hi {there}", "emotion": "happy"}\n```',
        'Sure! Here is my reply: {"dialogue": "Hi {there}", "emotion": "happy"} Hope that helps.',
        '{"dialogue": "Hi {there}", "emotion": "happy"}}}',
        'x { not json } then {"dialogue": "Hi {there}", "emotion": "happy"}',
    ],
)
def test_tolerant(raw: str) -> None:
    result = parse_output(raw)
    assert result.path is ParsePath.TOLERANT
    assert result.data == {"dialogue": "Hi {there}", "emotion": "happy"}


def test_raw_newlines_inside_strings_are_escaped() -> None:
    result = parse_output('{"dialogue": "line one\nline two\ttab", "emotion": "sad"}')
    assert result.path is ParsePath.TOLERANT
    assert result.data["dialogue"] == "line one\nline two\ttab"


@pytest.mark.parametrize("raw", ["", "no json here", "[1, 2]", '{"dialogue": NaN}', '{"unclosed": "', "{" * 5000])
def test_failed(raw: str) -> None:
    result = parse_output(raw)
    assert result.path is ParsePath.FAILED and result.data is None and result.error
