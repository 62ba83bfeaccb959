"""Test data shared by the suites: the guard NPC and the Eldmoor world."""

from __future__ import annotations

from loreguard.schemas import NpcProfile, WorldDefinition


def guard_profile(**overrides: object) -> NpcProfile:
    data: dict = {
        "id": "guard",
        "name": "Brom the Gate Guard",
        "persona": "You are Brom, a gruff but fair guard at the north gate of Eldmoor.",
        "canonical_facts": [
            {
                "id": "king_name",
                "text": "The king of Eldmoor is named Arthur.",
                "claims": [{"subject": "king", "attribute": "name", "value": "Arthur"}],
            },
            {"id": "gate_hours", "text": "The north gate closes at dusk."},
        ],
        "secrets": [{"id": "password", "text": "The gate password is 'silver moon'.", "markers": ["silver moon"]}],
    }
    data.update(overrides)
    return NpcProfile.model_validate(data)


def eldmoor_world(**overrides: object) -> WorldDefinition:
    data: dict = {
        "id": "eldmoor",
        "lore": "Eldmoor is a walled river town.",
        "canonical_facts": [{"id": "river", "text": "The river Ald runs through Eldmoor."}],
        "initial_state": {"weather": "rain"},
    }
    data.update(overrides)
    return WorldDefinition.model_validate(data)


_RAMBLE = (
    "The gate is old, its oak beams were cut when my grandfather was young, and the hinges groan "
    "each dawn; rain soaks the stones, moss creeps along the arch, crows nest above the tower, "
    "carts rattle past loaded with salt and barley, pilgrims hum hymns under their breath, "
    "children dare one another to touch the iron studs, and every winter someone swears a ghost "
    "walks the parapet humming a tune nobody remembers learning."
)


def ramble(chars: int) -> str:
    """An ordinary line at least `chars` long that never loops (the gate fails looping text as
    degenerate, so a test that wants a long reply uses this, not a repeated phrase)."""
    assert chars <= len(_RAMBLE), "ramble() is only so long"
    cut = _RAMBLE.find(" ", chars)
    return (_RAMBLE if cut < 0 else _RAMBLE[:cut]).rstrip(",;") + "."


def say(dialogue: str, emotion: str = "neutral", mutations: list | None = None) -> str:
    """A model output as the scripted backend returns it, in the grammar's layout: a world
    intent among `mutations` (the first) is written as the output's `intent`."""
    import json

    changes = list(mutations or [])
    granted = next((m for m in changes if m.get("kind") == "emit_world_intent"), None)
    intent = "none" if granted is None else {"type": granted["intent"], "params": dict(sorted(granted.get("params", {}).items()))}
    rest = [m for m in changes if m is not granted]
    return json.dumps({"dialogue": dialogue, "intent": intent, "emotion": emotion, "mutations": rest})


def rich_guard_profile(**overrides: object) -> NpcProfile:
    """The guard with rules of every severity, intents, fallbacks and few-shot examples."""
    data = guard_profile().model_dump(mode="json")
    data.update(
        {
            "secrets": [
                {
                    "id": "password",
                    "text": "The gate password is 'silver moon'.",
                    "topic": "the gate password",
                    "markers": ["silver moon"],
                }
            ],
            "allowed_intents": [
                {
                    "type": "open_gate",
                    "description": "Open a town gate.",
                    "params": {"gate_id": {"type": "string", "enum": ["north", "south"]}},
                },
                {
                    "type": "give_item",
                    "params": {
                        "item": {"type": "string", "max_length": 32},
                        "count": {"type": "integer", "minimum": 1, "maximum": 5},
                    },
                },
            ],
            "rules": [
                {
                    "id": "no_dragon",
                    "type": "prohibition",
                    "severity": "hard",
                    "prompt_injection": "mention the dragon attack; it is a state secret",
                    "checks": {"forbidden_phrases": ["dragon"]},
                },
                {
                    "id": "no_modern",
                    "type": "prohibition",
                    "severity": "critical",
                    "prompt_injection": "speak of anything modern",
                    "checks": {"forbidden_patterns": [r"\b(computer|internet|smartphone)s?\b"]},
                },
                {
                    "id": "short",
                    "type": "prohibition",
                    "severity": "soft",
                    "prompt_injection": "ramble; keep it under 200 characters",
                    "checks": {"max_length": 200},
                },
                {
                    "id": "greet",
                    "type": "requirement",
                    "severity": "soft",
                    "prompt_injection": "greet the newcomer as 'traveller'",
                    "conditions": {"trigger_reasons": ["zone_trigger"]},
                    "checks": {"required_phrases": ["traveller"]},
                },
                {
                    "id": "alarm_closed",
                    "type": "prohibition",
                    "severity": "hard",
                    "prompt_injection": "open any gate while the alarm sounds",
                    "conditions": {"world_state": {"alarm": True}},
                    "checks": {"forbidden_intents": ["open_gate"]},
                },
                {
                    "id": "polite",
                    "type": "requirement",
                    "severity": "soft",
                    "behavioural": True,
                    "prompt_injection": "address the player as 'friend'",
                },
            ],
            "fallbacks": {"by_trigger": {"player_utterance": ["Move along.", "Not now."]}, "generic": ["Hmph."]},
            "few_shot": [{"player": "Can I pass?", "npc": "Only before dusk, traveller.", "emotion": "neutral"}],
        }
    )
    data.update(overrides)
    return NpcProfile.model_validate(data)


def rich_world(**overrides: object) -> WorldDefinition:
    return eldmoor_world(state_defaults={"alarm": False}, **overrides)


def guard_in_character() -> NpcProfile:
    """The demo guard as before the world's rule decided the gate (issue 60): the model decides,
    in character, whether to open it. For the tests of the character's own decision."""
    from loreguard.server.demo import demo_npcs

    data = next(p for p in demo_npcs() if p.id == "guard").model_dump(mode="json")
    for spec in data["allowed_intents"]:
        spec.update(decided_by="character", requires={}, requires_words={})
    return NpcProfile.model_validate(data)


def merchant_in_character() -> NpcProfile:
    """The demo merchant as before the rules decided her sales (issue 58): the model decides
    whether to sell, and her wares have no prices. For the tests of the character's own decision."""
    from loreguard.server.demo import demo_npcs

    data = next(p for p in demo_npcs() if p.id == "merchant").model_dump(mode="json")
    for spec in data["allowed_intents"]:
        spec.update(decided_by="character", wares={})
    return NpcProfile.model_validate(data)
