"""Repair by cut (issue 57): a reply whose later sentence the gate refuses keeps the sentences
before it, without another generation; the record says where it was cut, and a replay cuts the
same."""

from __future__ import annotations

from pathlib import Path

from factories import say
from pipeline_helpers import ask
from stores import guard_in_character_store

from loreguard.schemas import InteractionOutcome
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit.recorder import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline


def _pipeline(path: Path, outputs: list[str]) -> GovernancePipeline:
    store = guard_in_character_store(path)  # the gate is the model's to grant: a cut must not grant it
    return GovernancePipeline(store, ScriptedBackend({"guard": outputs}), recorder=AuditRecorder(store, fingerprint=None))


def test_a_refused_last_sentence_is_cut_and_the_rest_is_the_answer(tmp_path: Path) -> None:
    kept = "I will not tell you the password."
    pipeline = _pipeline(tmp_path / "m.sqlite", [say(f"{kept} The password is 'sword in hand'."), say("Never.")])
    result = pipeline.interact(ask("What is the password?", npc="guard"))

    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == kept
    [attempt] = result.receipt.attempts  # no second generation
    assert "password" in {f.rule_id for f in attempt.failures}  # what the whole output broke, kept
    assert attempt.cut_to == len(kept)
    assert pipeline.recorder is not None
    report = Replayer(pipeline.recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0)


def test_a_refused_first_sentence_cannot_be_cut_away(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path / "m.sqlite", [say("The password is 'sword in hand'. Stand aside."), say("Never, traveller.")])
    result = pipeline.interact(ask("What is the password?", npc="guard"))
    assert result.dialogue == "Never, traveller." and len(result.receipt.attempts) == 2
    assert result.receipt.attempts[0].cut_to is None


def test_a_cut_grants_nothing_the_whole_reply_granted(tmp_path: Path) -> None:
    """A grant rides on the whole output: a cut reply is words only, so one whose words say the
    gate is open is refused like any grant in words only, and the retry decides."""
    opened = say(
        "Go on through, traveller. The dragon sleeps.",
        mutations=[{"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}}],
    )
    pipeline = _pipeline(tmp_path / "m.sqlite", [opened, say("Not without the captain's word.")])
    result = pipeline.interact(ask("Please open the gate.", npc="guard"))
    assert result.receipt.attempts[0].cut_to is None and not result.intents
