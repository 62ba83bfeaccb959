"""Lines the real embedded model wrote, labelled by hand (issue 31): every broken one is caught by
the rule its label names, every ordinary one passes first time. The data file says where the
lines come from; `unchecked` lines (incoherent, out of character) have no check and are only
counted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from factories import say
from pipeline_helpers import ask
from stores import demo_store

from loreguard.schemas import InteractionOutcome, InteractionResult
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.inference import ScriptedBackend

DATA = Path(__file__).parent / "data" / "model_lines.json"
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def _lines() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text(encoding="utf-8"))["lines"]


def _checked() -> list[dict[str, Any]]:
    return [line for line in _lines() if not line["id"].startswith("unchecked_")]


def _run(tmp_path: Path, case: dict[str, Any]) -> InteractionResult:
    """The case's earlier exchanges (each must be heard as the model wrote it), then its line."""
    npc = case["npc"]
    earlier = [dialogue for _, dialogue in case["earlier"]]
    backend = ScriptedBackend({npc: [say(d) for d in earlier] + [say(case["dialogue"])] * 3}, special_tokens=SPECIALS)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
    for player, dialogue in case["earlier"]:
        before = pipeline.interact(ask(player, npc=npc, scene="eldmoor"))
        assert before.outcome is InteractionOutcome.VALIDATED and before.dialogue == dialogue, before.receipt.attempts
    return pipeline.interact(ask(case["player"], npc=npc, scene="eldmoor"))


def _first_rules(result: InteractionResult) -> set[str]:
    first = result.receipt.attempts[0]
    return {f.rule_id or "" for f in first.failures} | {f.kind.value for f in first.findings if f.action.value != "mapped"}


@pytest.mark.parametrize("case", _checked(), ids=lambda c: c["id"])
def test_a_labelled_model_line(case: dict[str, Any], tmp_path: Path) -> None:
    result = _run(tmp_path, case)
    rules = _first_rules(result)
    if case["expect"] is None:
        assert result.outcome is InteractionOutcome.VALIDATED and not result.receipt.attempts[0].failures, rules
        assert result.dialogue == case["dialogue"]
    else:
        assert case["expect"] in rules, (case["id"], rules)
        assert result.dialogue != case["dialogue"], "the player must not hear the broken line as written"


def test_the_corpus_covers_every_category_of_issue_31() -> None:
    counts = Counter(line["category"] for line in _lines())
    for category in (
        "contradiction of canon",
        "contradiction of world state",
        "self-repeat",
        "echo of the player's earlier line",
        "cut on a dangling word",
        "instructions or correction read out",
        "ordinary",
    ):
        assert counts[category] >= 1, category
    assert sum(n for c, n in counts.items() if c != "ordinary" and not c.startswith("incoherent")) >= 30
