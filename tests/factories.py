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
