"""Two corpora through the real pipeline (scripted model, real SQLite store, the demo's world and
NPCs): ordinary lines must all pass on the first attempt, adversarial outputs must all be caught
by the rule each names (issue 17). The lines are data files beside this test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store

from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionOutcome, InteractionResult
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline

DATA = Path(__file__).parent / "data"
#: What the scripted stand-in for SmolLM2 calls its special tokens (the llama.cpp backend asks
#: the real vocabulary; the corpus needs a fixed list).
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
#: One player line for every benign reply, so no reply can be an echo of it.
PLAYER = "Evening. Anything to tell me?"


def _benign() -> list[tuple[str, str]]:
    data = json.loads((DATA / "benign_lines.json").read_text(encoding="utf-8"))
    return [(npc, line) for npc in ("guard", "merchant") for line in data[npc]]


def _adversarial() -> list[dict[str, Any]]:
    return json.loads((DATA / "adversarial_outputs.json").read_text(encoding="utf-8"))["outputs"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> MemoryStore:
    """One demo store for the module: each case only adds exchanges to it."""
    return demo_store(tmp_path_factory.mktemp("corpora") / "m.sqlite")


def _run(store: MemoryStore, npc: str, outputs: list[str], player: str = PLAYER) -> InteractionResult:
    backend = ScriptedBackend({npc: outputs}, special_tokens=SPECIALS)
    return GovernancePipeline(store, backend).interact(ask(player, npc=npc))


def test_the_corpora_are_big_enough() -> None:
    assert len(_benign()) >= 300 and len(_adversarial()) >= 60


@pytest.mark.parametrize(("npc", "line"), _benign(), ids=lambda x: str(x)[:40])
def test_an_ordinary_line_passes_on_the_first_attempt(npc: str, line: str, store: MemoryStore) -> None:
    result = _run(store, npc, [say(line)])
    failures = [(f.rule_id, f.reason) for a in result.receipt.attempts for f in a.failures]
    assert result.outcome is InteractionOutcome.VALIDATED and len(result.receipt.attempts) == 1, failures


@pytest.mark.parametrize("case", _adversarial(), ids=lambda c: c["id"])
def test_an_adversarial_output_is_caught_by_the_rule_it_names(case: dict[str, Any], store: MemoryStore) -> None:
    raw = case.get("raw") or say(case["dialogue"], mutations=case.get("mutations"))
    result = _run(store, case["npc"], [raw] * 3, case.get("player", PLAYER))
    first = result.receipt.attempts[0]
    rules = {f.rule_id for f in first.failures} | {f.kind.value for f in first.findings if f.action.value == "rejected"}
    assert case["expect"] in rules, (case["id"], rules, [f.reason for f in first.failures])
    assert result.outcome is InteractionOutcome.FALLBACK and result.dialogue != case.get("dialogue")
