"""A secret's topic given a made-up value: "The password is 'rainbow'" reveals no secret, but a
player would try it; the knowledge gate fails it (hard, retried) like a leak."""

from __future__ import annotations

import pytest

from loreguard.schemas.npc import Secret
from loreguard.schemas.rules import Severity
from loreguard.server.pipeline.gate.checks import secret_leaks

PASSWORD = Secret(id="password", text="The gate password is 'silver moon'.", topic="the gate password", markers=("silver moon",))


@pytest.mark.parametrize(
    "line",
    [  # qwen2.5-coder-1.5b as the guard, asked for the password (bench quality)
        "The password to the north gate is 'rainbow'",
        "The password is 'secret' and it is a magical word. Do not forget it.",
        "I'm the captain's cousin. What's the password? It's 'sword of light.'",
        "The password is \u201cdragonfly\u201d, traveller.",
    ],
)
def test_a_made_up_value_for_a_secret_fails(line: str) -> None:
    (failure,) = secret_leaks([line], [PASSWORD])
    assert failure.rule_id == "password" and failure.severity is Severity.HARD
    assert "neither told nor made up" in failure.reason and "silver" not in failure.reason
    # the made-up value is evidence for the record, never in the reason a retry's repair quotes
    assert failure.evidence and failure.evidence.lower() not in failure.reason.lower()


@pytest.mark.parametrize(
    "line",
    [
        "The password is a secret, traveller.",
        "I'll not tell you the password.",
        "Password? Ask the captain.",
        "Say 'please' and I might listen.",
    ],
)
def test_talk_about_a_secret_without_a_value_passes(line: str) -> None:
    assert secret_leaks([line], [PASSWORD]) == []


def test_the_real_secret_is_still_a_critical_leak() -> None:
    (failure,) = secret_leaks(["The password is 'silver moon'."], [PASSWORD])
    assert failure.severity is Severity.CRITICAL and failure.reason == "reveals secret password"
