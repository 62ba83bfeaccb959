"""Schemas: bad input names the field, facts are frozen, exported JSON Schema is current."""

from __future__ import annotations

import json

import pytest
from factories import guard_profile
from paths import ROOT
from pydantic import ValidationError

from loreguard.memory import MemoryStore
from loreguard.schemas import (
    MESSAGES,
    Envelope,
    InteractionContext,
    NpcProfile,
    ParsedOutput,
    RuleSet,
    SetWorldState,
    TriggerReason,
    WorldDefinition,
)
from loreguard.schemas.export import json_schemas, render

SCHEMA_DIR = ROOT / "schemas" / "json"


def _error_locations(exc: ValidationError) -> set[str]:
    return {".".join(str(part) for part in error["loc"]) for error in exc.errors()}


def test_interaction_context_minimal_and_defaults() -> None:
    ctx = InteractionContext.model_validate({"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Hi"})
    assert ctx.trigger_reason is TriggerReason.PLAYER_UTTERANCE
    assert ctx.tags == () and ctx.interaction_count == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"npc_id": "guard", "trigger_reason": "shouting", "player_input": ""}, "trigger_reason"),
        ({"npc_id": "bad id!", "trigger_reason": "custom", "player_input": ""}, "npc_id"),
        ({"npc_id": "@world", "trigger_reason": "custom", "player_input": ""}, "npc_id"),
        ({"npc_id": "guard", "trigger_reason": "custom", "player_input": "x" * 5000}, "player_input"),
        ({"npc_id": "guard", "trigger_reason": "custom", "interaction_count": -1}, "interaction_count"),
        ({"npc_id": "guard", "trigger_reason": "custom", "surprise": 1}, "surprise"),
        ({"trigger_reason": "custom"}, "npc_id"),
    ],
)
def test_bad_context_names_the_field(body: dict, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        InteractionContext.model_validate(body)
    assert field in _error_locations(caught.value)


def test_models_are_frozen() -> None:
    ctx = InteractionContext(npc_id="guard", trigger_reason=TriggerReason.CUSTOM)
    with pytest.raises(ValidationError):
        ctx.npc_id = "other"  # type: ignore[misc]


def test_profile_rejects_duplicates_and_nan() -> None:
    with pytest.raises(ValidationError, match="duplicate canonical fact id"):
        guard_profile(canonical_facts=[{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
    with pytest.raises(ValidationError) as caught:
        SetWorldState(scope="guard", key="k", value=float("nan"))
    assert "value" in {str(e["loc"][0]) for e in caught.value.errors()}


def test_rules_validate_regex_and_behavioural_severity() -> None:
    with pytest.raises(ValidationError, match="invalid regular expression"):
        RuleSet.model_validate(
            {"id": "r", "rules": [{"id": "a", "type": "prohibition", "checks": {"forbidden_patterns": ["(unclosed"]}}]}
        )
    with pytest.raises(ValidationError, match="must be soft"):
        RuleSet.model_validate({"id": "r", "rules": [{"id": "a", "type": "requirement", "behavioural": True}]})
    with pytest.raises(ValidationError, match="only a prohibition forbids a request"):
        RuleSet.model_validate(
            {"id": "r", "rules": [{"id": "a", "type": "requirement", "checks": {"forbidden_requests": ["for free"]}}]}
        )


def test_parsed_output_is_bounded() -> None:
    ok = ParsedOutput.model_validate({"dialogue": "Halt!", "mutations": [{"kind": "append_episodic", "text": "Saw a stranger."}]})
    assert ok.emotion.value == "neutral"
    with pytest.raises(ValidationError) as caught:
        ParsedOutput.model_validate({"dialogue": "x" * 601})
    assert "dialogue" in _error_locations(caught.value)
    with pytest.raises(ValidationError):
        ParsedOutput.model_validate({"dialogue": "x", "mutations": [{"kind": "rewrite_canon"}]})


def test_invalid_registration_changes_nothing(store: MemoryStore) -> None:
    before = store.memory_hash()
    with pytest.raises(ValidationError) as caught:
        NpcProfile.model_validate({**guard_profile().model_dump(), "canonical_facts": [{"id": "x"}]})
    assert "canonical_facts.0.text" in _error_locations(caught.value)
    assert store.memory_hash() == before


def test_ungrounded_numbers_defaults_to_allow_and_names_the_field_when_wrong() -> None:
    assert guard_profile().ungrounded_numbers.value == "allow"
    assert guard_profile(ungrounded_numbers="flag").ungrounded_numbers.value == "flag"
    with pytest.raises(ValidationError) as caught:
        guard_profile(ungrounded_numbers="sometimes")
    assert _error_locations(caught.value) == {"ungrounded_numbers"}


def test_every_protocol_message_has_models() -> None:
    assert sorted(MESSAGES) == sorted(
        [
            "hello",
            "world.load",
            "npc.register",
            "npc.warm",
            "npc.status",
            "world.set_state",
            "interact",
            "interact.cancel",
            "memory.get",
            "save",
            "load",
            "audit.tail",
            "audit.export",
            "stats",
            "scene.start",
            "scene.next",
            "scene.say",
            "scene.end",
            "scene.get",
        ]
    )
    Envelope.model_validate({"v": 1, "id": 7, "type": "hello", "body": {}})
    with pytest.raises(ValidationError):
        Envelope.model_validate({"v": 1, "id": 1.5, "type": "hello", "body": {}})


def test_exported_json_schema_is_current() -> None:
    expected = json_schemas()
    on_disk = {p.name for p in SCHEMA_DIR.glob("*.json")}
    assert on_disk == set(expected), "run: loreguard schemas export schemas/json"
    for name, schema in expected.items():
        assert (SCHEMA_DIR / name).read_text(encoding="utf-8") == render(schema), (
            f"schemas/json/{name} is stale: run `loreguard schemas export schemas/json`"
        )
        json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))


def test_protocol_message_reference_is_current() -> None:
    from loreguard.schemas.export import protocol_reference

    path = ROOT / "docs" / "protocol-messages.md"
    assert path.read_text(encoding="utf-8") == protocol_reference(), (
        "docs/protocol-messages.md is stale: run `loreguard schemas docs docs/protocol-messages.md`"
    )


@pytest.mark.parametrize("container", ["npc", "world", "rule_set"])
@pytest.mark.parametrize("severity", ["hard", "critical"])
def test_a_behavioural_rule_must_be_soft_on_every_path(container: str, severity: str) -> None:
    rule = {"id": "style", "type": "requirement", "severity": severity, "behavioural": True}
    with pytest.raises(ValidationError, match="behavioural rule 'style' must be soft, not " + severity):
        if container == "npc":
            NpcProfile.model_validate({"id": "g", "name": "G", "persona": "p", "rules": [rule]})
        elif container == "world":
            WorldDefinition.model_validate({"id": "w", "rules": [rule]})
        else:
            RuleSet.model_validate({"id": "r", "rules": [rule]})


@pytest.mark.parametrize("phrase", ["🐉", "!!!", "…", " - ", "🐉 ✨"])
@pytest.mark.parametrize("field", ["forbidden_phrases", "required_phrases"])
def test_a_phrase_that_folds_to_no_word_is_refused(field: str, phrase: str) -> None:
    rule = {"id": "r", "type": "prohibition" if field.startswith("forbidden") else "requirement"}
    with pytest.raises(ValidationError, match="no letter or digit") as caught:
        NpcProfile.model_validate(
            {"id": "g", "name": "G", "persona": "p", "rules": [{**rule, "checks": {field: ["dragon", phrase]}}]}
        )
    assert _error_locations(caught.value) == {f"rules.0.checks.{field}.1"}
    with pytest.raises(ValidationError):
        WorldDefinition.model_validate({"id": "w", "rules": [{**rule, "checks": {field: [phrase]}}]})
    NpcProfile.model_validate(
        {"id": "g", "name": "G", "persona": "p", "rules": [{**rule, "checks": {field: ["ドラゴン", "Ключ", "42"]}}]}
    )


def test_a_secret_marker_that_folds_to_no_word_is_refused() -> None:
    base = {"id": "g", "name": "G", "persona": "p"}
    with pytest.raises(ValidationError, match="no letter or digit") as caught:
        NpcProfile.model_validate({**base, "secrets": [{"id": "pw", "text": "The password.", "markers": ["silver", "🌙"]}]})
    assert _error_locations(caught.value) == {"secrets.0.markers.1"}
    with pytest.raises(ValidationError, match="secret 'pw' has no markers, so its text is the marker") as caught:
        NpcProfile.model_validate({**base, "secrets": [{"id": "pw", "text": "🌙🗝️"}]})
    assert _error_locations(caught.value) == {"secrets.0"}
    NpcProfile.model_validate({**base, "secrets": [{"id": "pw", "text": "🌙🗝️", "markers": ["moon key"]}]})


@pytest.mark.parametrize(
    "checks",
    [{"forbidden_phrases": ["dragon"]}, {"required_phrases": ["aye"]}, {"max_length": 10}, {"forbidden_intents": ["open_gate"]}],
)
def test_a_permission_that_carries_a_check_is_refused(checks: dict) -> None:
    rule = {"id": "market", "type": "permission", "prompt_injection": "talk about prices", "checks": checks}
    with pytest.raises(ValidationError, match="permission rule 'market' cannot carry checks") as caught:
        NpcProfile.model_validate({"id": "g", "name": "G", "persona": "p", "rules": [rule]})
    assert f"checks.{next(iter(checks))}" in str(caught.value) and _error_locations(caught.value) == {"rules.0"}
    NpcProfile.model_validate({"id": "g", "name": "G", "persona": "p", "rules": [{**rule, "checks": {}}]})
