"""The addon's plain words for governance (LoreguardGovernanceText) and the game's governance
view (LoreguardGovernanceLog), in Godot (godot_addon/tests/test_governance_text.gd), fed what
the sidecar really emits: every gate, built-in rule id, fallback source, give-up reason, trigger
and outcome found in its source has a phrase; failures made by the sidecar's own checks read as
phrases with the rule's id in brackets; the replies of a governance-heavy streamed session make
one entry per line, one paragraph per attempt, and fold what a refused attempt said."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from godot_helpers import GOVERNANCE_LINES, GOVERNANCE_SCRIPT, ROOT, run_godot
from sidecar_helpers import running_sidecar

from loreguard.client import Client
from loreguard.memory.claims import Contradiction
from loreguard.schemas.interaction import TriggerReason
from loreguard.schemas.npc import OutputHygiene, OutputLimits, Secret, UngroundedNumbers
from loreguard.schemas.output import ParsedOutput
from loreguard.schemas.receipt import FindingKind, GateName, InteractionOutcome
from loreguard.schemas.rules import Constraint, RuleChecks, RuleType, Severity
from loreguard.server.demo import demo_world
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline.gate.canonical import _contradiction_failure, _number_failure
from loreguard.server.pipeline.gate.checks import check_constraint, secret_leaks
from loreguard.server.pipeline.gate.degenerate import find_degenerate
from loreguard.server.pipeline.gate.grounding import NumberProblem, Subject
from loreguard.server.pipeline.gate.hygiene import scrub_dialogue
from loreguard.server.pipeline.gate.parroting import find_parroting
from loreguard.server.pipeline.gate.self_repeats import find_self_repeats
from loreguard.server.pipeline.turn.transcript import RecentReply

PIPELINE = ROOT / "server" / "pipeline"


def _found(pattern: str, *names: str) -> set[str]:
    return {m for name in names for m in re.findall(pattern, (PIPELINE / name).read_text(), flags=re.MULTILINE)}


def sidecar_codes() -> dict[str, list[str]]:
    """Every code the sidecar puts in a receipt that a designer would otherwise read raw."""
    modules = [str(p.relative_to(PIPELINE)) for p in PIPELINE.rglob("*.py")]  # the gate's checks in gate/
    built_in = _found(r'^[A-Z_]+_RULE = "(\w+)"', *modules) | _found(r'rule_id="(\w+)"', *modules)
    built_in |= {kind.value for kind in FindingKind}
    sources = _found(r'\("(\w+)", \*_lines', "fallback.py") | _found(r'\("(\w+)", "\w+\.fallbacks\.generic"', "fallback.py")
    sources |= _found(r'source="(\w+)"', "fallback.py")
    give_ups = _found(r'GiveUp\(f?"(\w+)', "running/attempt.py") | _found(r'return None, \(\), "(\w+)"', "lifecycle.py")
    return {
        "gates": sorted(g.value for g in GateName),
        "built_in_rules": sorted(built_in),
        "fallback_sources": sorted(sources),
        "give_ups": sorted(give_ups),
        "triggers": sorted(t.value for t in TriggerReason),
        "outcomes": sorted(o.value for o in InteractionOutcome),
    }


def test_the_codes_are_found_in_the_sidecar_source() -> None:
    """The greps above still find what they look for (a renamed constant would hide a code)."""
    codes = sidecar_codes()
    assert {"max_raw_chars", "repeated_ngram", "empty_after_hygiene", "parroting", "ungrounded_numbers"} <= set(
        codes["built_in_rules"]
    )
    assert set(codes["fallback_sources"]) == {
        "npc_trigger",
        "world_trigger",
        "npc_generic",
        "world_generic",
        "emergency",
        "silence",
        "deal_lines",
    }
    assert set(codes["give_ups"]) == {"backend", "critical", "attempts_exhausted", "time_budget"}


def real_failures() -> list[dict]:
    """Failures made by the sidecar's own checks, one of each kind of reason they write."""
    checks = RuleChecks(
        forbidden_phrases=["dragon"],
        forbidden_patterns=[r"\bphones?\b"],
        required_phrases=["traveller"],
        required_patterns=[r"\bsir\b"],
        max_length=10,
        forbidden_intents=["open_gate"],
        required_intents=["give_item"],
        forbidden_emotions=["angry"],
    )
    rule = Constraint(rule_id="house_rules", type=RuleType.PROHIBITION, severity=Severity.HARD, text="x", checks=checks)
    output = ParsedOutput.model_validate(
        {
            "dialogue": "A dragon has a phone.",
            "emotion": "angry",
            "mutations": [{"kind": "emit_world_intent", "intent": "open_gate", "params": {}}],
        }
    )
    limits = OutputLimits()
    said_before = "The gate opens at dawn and closes at dusk, traveller."
    price = Subject(label="world_state:price.bread", name="price.bread", value=3, nouns=frozenset(), money=True)
    failures = [
        *check_constraint(rule, output, "", GateName.CONSTRAINTS),
        *secret_leaks(
            ["the password is silver moon"], [Secret(id="password", text="It is silver moon.", markers=["silver moon"])]
        ),
        *find_degenerate("the gate the gate the gate the gate the gate the gate the gate the gate", limits),
        *find_degenerate("Hello (there friend.", limits),
        *find_degenerate("Hello <|im_end|>", limits, ["<|im_end|>"]),
        *find_degenerate("...", limits),
        *scrub_dialogue(
            "Brom: *smiles* As an AI, I [MEMORY: x] cannot.", npc_name="Brom", npc_id="guard", policy=OutputHygiene.STRICT
        ).failures,
        *find_parroting(
            "What is the password for the gate tonight?", limits, player_input="What is the password for the gate tonight?"
        ),
        *find_self_repeats(
            said_before, "Where is the inn?", (RecentReply(player="When does it open?", dialogue=said_before),), limits
        ),
        _contradiction_failure(
            Contradiction(
                fact_id="king", subject="the king", attribute="name", canonical_value="Aldric", asserted="Harold", negated=False
            )
        ),
        _contradiction_failure(
            Contradiction(
                fact_id="",
                subject="alarm",
                attribute="state",
                canonical_value="on",
                asserted="off",
                negated=False,
                state_key="alarm",
            )
        ),
        _number_failure(NumberProblem(stated="7", subject=price), UngroundedNumbers.FLAG),
        _number_failure(NumberProblem(stated="12 silver"), UngroundedNumbers.FLAG),
    ]
    return [f.model_dump(mode="json") for f in failures if f is not None]


def session_replies(data: Path) -> list[dict]:
    """The `interact.ok` bodies of GOVERNANCE_LINES, streamed, as the game receives them."""
    purse = demo_world().initial_state["player.purse"]
    replies = []
    with running_sidecar(data, ScriptedBackend(GOVERNANCE_SCRIPT, cycle=True)) as sidecar, Client(sidecar.address) as lg:
        for npc, line in GOVERNANCE_LINES:
            reply = list(lg.interact_stream(npc, line))[-1]
            for intent in reply.intents:  # the game settles a sale, as the demo's main.gd does
                if intent.payment is not None:
                    purse -= intent.payment.value
                    lg.set_state({"player.purse": purse, "merchant.lanterns": 3 - int(intent.params["count"])})
            replies.append(reply.model_dump(mode="json"))
    return replies


@pytest.mark.slow
def test_governance_text_and_log_in_godot(tmp_path: Path) -> None:
    given = {"codes": sidecar_codes(), "failures": real_failures(), "replies": session_replies(tmp_path)}
    (tmp_path / "given.json").write_text(json.dumps(given))
    result = run_godot(
        ["-s", "res://tests/test_governance_text.gd"], timeout=120, env={"LOREGUARD_TEST_INPUT": str(tmp_path / "given.json")}
    )
    output = result.stdout + result.stderr
    sys.stdout.write(output)  # the phrases, for a person reading the test log
    assert result.returncode == 0 and " 0 failed" in output and "SCRIPT ERROR" not in output, output
