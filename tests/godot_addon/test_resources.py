"""The designer Resources against the sidecar's JSON Schema: every field a Resource sends is one
the schema knows, every schema field is one a Resource can set, and a Resource left at its
defaults sends the schema's defaults. The Resources are hand-written GDScript; this keeps them
from drifting from the pydantic models. Also what the inspector shows of them: a description
for every exported field, no revert arrows on the imported demo resources."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from godot_helpers import ADDON_PROJECT, DEMO_PROJECT, run_godot
from paths import ROOT

SCHEMAS = ROOT / "schemas" / "json"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def defaults() -> dict[str, dict[str, Any]]:
    result = run_godot(["-s", "res://tests/dump_defaults.gd"], timeout=120)
    lines = [line for line in result.stdout.splitlines() if line.startswith("LOREGUARD_DEFAULTS ")]
    assert result.returncode == 0 and lines, result.stdout + result.stderr
    return json.loads(lines[0].removeprefix("LOREGUARD_DEFAULTS "))


def _schemas() -> dict[str, dict[str, Any]]:
    """Each Resource's schema, found the way a body nests it."""
    profile = json.loads((SCHEMAS / "npc.register.request.json").read_text())
    world = json.loads((SCHEMAS / "world.load.request.json").read_text())
    defs = {**world.get("$defs", {}), **profile.get("$defs", {})}

    def ref(schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema or "anyOf" in schema:
            if "$ref" in schema:
                schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
            else:
                schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
        return schema

    props = profile["properties"]
    fact = ref(props["canonical_facts"]["items"])
    intent = ref(props["allowed_intents"]["items"])
    rule = ref(props["rules"]["items"])
    return {
        "rule_checks": ref(rule["properties"]["checks"]),
        "rule_conditions": ref(rule["properties"]["conditions"]),
        "fallbacks": ref(props["fallbacks"]),
        "profile": profile,
        "bounds": ref(props["bounds"]),
        "output_limits": ref(props["output_limits"]),
        "world": world,
        "fact": fact,
        "claim": ref(fact["properties"]["claims"]["items"]),
        "secret": ref(props["secrets"]["items"]),
        "intent": intent,
        "intent_param": ref(next(iter(intent["properties"]["params"]["patternProperties"].values()))),
        "example": ref(props["few_shot"]["items"]),
        "rule": rule,
    }


def _sent(defaults: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        **defaults,
        "bounds": defaults["profile"]["bounds"],
        "output_limits": defaults["profile"]["output_limits"],
        "fallbacks": defaults["profile"]["fallbacks"],
        "rule_checks": defaults["rule"]["checks"],
        "rule_conditions": defaults["rule"]["conditions"],
    }


@pytest.mark.parametrize("name", sorted(_schemas()))
def test_a_resource_sends_only_fields_the_schema_knows(name: str, defaults: dict[str, dict[str, Any]]) -> None:
    schema = _schemas()[name]
    assert set(_sent(defaults)[name]) <= set(schema["properties"]), set(_sent(defaults)[name]) - set(schema["properties"])


@pytest.mark.parametrize("name", sorted(_schemas()))
def test_every_schema_field_can_be_set_from_a_resource(name: str, defaults: dict[str, dict[str, Any]]) -> None:
    schema = _schemas()[name]
    optional_numbers = {k for k, v in schema["properties"].items() if "anyOf" in v or k in {"minimum", "maximum"}}
    missing = set(schema["properties"]) - set(_sent(defaults)[name])
    assert missing <= optional_numbers, missing - optional_numbers


@pytest.mark.parametrize("name", sorted(_schemas()))
def test_a_resource_at_its_defaults_sends_the_schema_defaults(name: str, defaults: dict[str, dict[str, Any]]) -> None:
    schema, sent = _schemas()[name], _sent(defaults)[name]
    differ = {
        key: (sent[key], spec["default"])
        for key, spec in schema["properties"].items()
        if "default" in spec and key in sent and key not in ("bounds", "output_limits") and not _same(sent[key], spec["default"])
    }
    assert not differ, f"{name}: Resource default vs schema default: {differ}"


def _same(sent: Any, default: Any) -> bool:
    if isinstance(default, (int, float)) and not isinstance(default, bool) and isinstance(sent, (int, float)):
        return float(sent) == float(default)
    if isinstance(default, dict) and isinstance(sent, dict):
        # A Resource leaves an unset optional value out; the schema's default says None.
        return all(_same(sent[k], v) if k in sent else v is None for k, v in default.items()) and set(sent) <= set(default)
    return bool(sent == default)


def test_godot_documents_every_exported_field(tmp_path: Path) -> None:
    """Godot's own doc generator (the text of the inspector's tooltips) has a description for
    every exported field of every addon class: a field without a `##` comment, or one Godot does
    not attach (a blank line between), shows "No description available" to a designer."""
    result = run_godot(["--doctool", str(tmp_path), "--gdscript-docs", "res://addons/loreguard"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    undocumented = []
    for path in sorted((ADDON_PROJECT / "addons" / "loreguard").rglob("*.gd")):
        source = path.read_text()
        class_name = re.search(r"^class_name\s+(\w+)", source, re.MULTILINE)
        exported = re.findall(r"^@export\w*(?:\([^)]*\))?\s+var\s+(\w+)", source, re.MULTILINE)
        if class_name is None or not exported:
            continue
        members = {
            member.get("name"): (member.text or "").strip()
            for member in ElementTree.parse(tmp_path / f"{class_name.group(1)}.xml").getroot().iter("member")
        }
        undocumented += [f"{class_name.group(1)}.{name}" for name in exported if not members.get(name)]
    assert not undocumented, "exported fields Godot shows without a description: " + ", ".join(undocumented)


def test_imported_demo_resources_save_no_field_at_its_default() -> None:
    """A field written at its default shows a revert arrow in the inspector; Godot writes one
    when it cannot tell the default (e.g. a PackedStringArray declared `= []`)."""
    at_default = re.compile(r"^\w+ = (PackedStringArray\(\)|\[\]|\{\}|Array\[[^\]]+\]\(\[\]\))$")
    found = [
        f"{path.relative_to(DEMO_PROJECT)}:{number}: {line}"
        for path in sorted(DEMO_PROJECT.rglob("*.tres"))
        if ".godot" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if at_default.match(line)
    ]
    assert not found, "\n".join(found)
