"""The terminal demo runs end to end on real memory and shows each governance behaviour."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pipeline_helpers import ask, make_pipeline

from loreguard.memory import DataFolderLock, MemoryStore
from loreguard.server.cli import main
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.demo.run import run_demo


def test_demo_data_is_valid() -> None:
    world = demo_world()
    npcs = demo_npcs()
    assert world.id == "eldmoor" and [n.id for n in npcs] == ["guard", "merchant"]
    assert all(n.secrets and n.allowed_intents and n.rules for n in npcs)


def test_demo_conversation(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_demo(tmp_path, out) == 0
    text = out.getvalue()
    table = text[text.index("#  npc") :].splitlines()[2:8]
    cells = [row.split() for row in table]
    assert [c[1] for c in cells] == ["guard", "guard", "guard", "merchant", "merchant", "guard"]
    assert [c[4] for c in cells] == ["n", "n", "y", "n", "n", "n"]  # one fallback: the secret
    assert cells[1][2] == "2" and cells[4][2] == "2"  # the retried turns
    assert "give_item(count=1,item=lantern)" in text
    assert "silver moon" not in text.lower() and "s-i-l-v-e-r" not in text.lower()
    with MemoryStore(tmp_path / "memory.sqlite") as store:
        assert store.interactions("guard") == 4 and store.interactions("merchant") == 2
        assert any("lantern" in e.text for e in store.scope("merchant").episodic)


def test_a_demo_on_a_data_folder_another_sidecar_serves_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with DataFolderLock(tmp_path):
        assert run_demo(tmp_path, io.StringIO()) == 4
    assert "is in use by another Loreguard sidecar" in capsys.readouterr().err
    assert not (tmp_path / "memory.sqlite").exists()


def test_cli_demo_and_bench(tmp_path: Path, capsys) -> None:
    assert main(["demo", "--scripted", "--data", str(tmp_path)]) == 0
    assert "fallback" in capsys.readouterr().out
    assert main(["bench", "governance", "--interactions", "20"]) == 0
    lines = dict(line.split(": ") for line in capsys.readouterr().out.strip().splitlines())
    assert set(lines) >= {"governance_p50_us", "governance_p99_us", "interactions"}
    assert lines["interactions"] == "20" and float(lines["governance_p50_us"]) > 0


@pytest.mark.model
def test_demo_with_the_embedded_model(tmp_path: Path, capsys) -> None:
    assert main(["demo", "--model", "embedded", "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "SmolLM2-135M-Instruct.Q4_1.gguf via llama.cpp" in out
    assert "silver moon" not in out.lower()
    with MemoryStore(tmp_path / "memory.sqlite") as store:
        assert store.interactions("guard") == 4 and store.interactions("merchant") == 2


def test_interactive_chat_after_the_scripted_turns(tmp_path: Path) -> None:
    out = io.StringIO()
    lines = iter(["Is the road north safe?", ""])
    assert run_demo(tmp_path, out, interactive="guard", read=lambda prompt: next(lines)) == 0
    chat = out.getvalue().split("Talking to Brom (guard).", 1)[1]
    # The recorded script has no line left for this, so the authored fallback answers.
    assert "Brom: " in chat and "fallback y" in chat


def test_the_demo_guard_cannot_say_the_shut_north_gate_is_open(tmp_path: Path) -> None:
    def say(line: str) -> str:
        return json.dumps({"dialogue": line, "emotion": "neutral", "mutations": []})

    world, (guard, _) = demo_world(), demo_npcs()
    assert world.initial_state["gate.north"] == "closed" and "gate.north" in world.state_claims
    outputs = [say("Gate's open till dusk, traveller."), say("The gate is shut for the night, traveller.")]
    pipeline, _ = make_pipeline(tmp_path / "m.sqlite", outputs, profile=guard, world=world)
    result = pipeline.interact(ask("Is the north gate open?"))
    assert result.attempts == 2 and result.dialogue == "The gate is shut for the night, traveller."
    assert result.receipt.attempts[0].failures[0].rule_id == "world_state:gate.north"


@pytest.mark.model
def test_bench_quality_reports_what_the_player_heard_and_the_judges_cost(capsys) -> None:
    from loreguard.server.cli import main

    assert main(["bench", "quality", "--lines", "4", "--run", "after", "--judge", "--threads", "2"]) == 0
    out = capsys.readouterr()
    figures = dict(line.split(": ", 1) for line in out.out.splitlines() if ": " in line)
    assert 0.0 <= float(figures["after_distinct_reply_rate"]) <= 1.0
    assert 0.0 <= float(figures["after_discretionary_grant_rate"]) <= 1.0  # the guard's requests it may turn down
    assert figures["after_self_repeats_shown"] == "0"  # the gate's repeats_itself: none is heard
    assert int(figures["after_fallback_lines_repeated"]) >= 0
    assert int(figures["after_judge_asked"]) >= int(figures["after_judge_verdicts"]) >= 0
    assert float(figures["after_judge_ms_p50"]) >= 0.0
    assert out.err.count("[after ") == 4  # every line heard is printed
