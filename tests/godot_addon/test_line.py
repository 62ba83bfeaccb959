"""LoreguardLine, the typed `interact.ok` reply of the Godot addon: its fields are the wire's
InteractionResult fields by name, and it reads full, minimal and malformed bodies (in Godot)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from godot_helpers import ADDON_PROJECT, ROOT, run_godot

CLIENT = ADDON_PROJECT / "addons" / "loreguard" / "client"
REPLY_SCHEMA = ROOT / "schemas" / "json" / "interact.reply.json"


def _fields(script: Path) -> set[str]:
    """The script's top-level `var`s."""
    return set(re.findall(r"^var (\w+)", script.read_text(), flags=re.MULTILINE))


def test_the_line_has_a_field_for_every_reply_field_and_no_other() -> None:
    wire = set(json.loads(REPLY_SCHEMA.read_text())["properties"])
    # The receipt stays in `body` (the debugger reads it); `body` is the raw reply itself.
    assert _fields(CLIENT / "line.gd") - {"body"} == wire - {"receipt"}


def test_a_world_intent_has_the_wire_fields() -> None:
    schema = json.loads(REPLY_SCHEMA.read_text())["$defs"]["WorldIntent"]
    assert _fields(CLIENT / "world_intent.gd") == set(schema["properties"])


@pytest.mark.slow
def test_line_reads_reply_bodies() -> None:
    result = run_godot(["-s", "res://tests/test_line.gd"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output
