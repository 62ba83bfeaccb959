"""Lines real models wrote, labelled by hand: every broken one is caught by the rule its label
names, every ordinary one passes first time. Two corpora: `model_lines.json`, the embedded
SmolLM2-135M (issue 31), and `coder_lines.json`, Qwen2.5-Coder-1.5B and -0.5B Instruct (issue 45).
Each data file says where its lines come from; `unchecked` lines (incoherent, out of character)
have no check and are only counted, and must not be flagged by a check meant for something else."""

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
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline

DATA = Path(__file__).parent / "data"
CORPORA = ("model_lines", "coder_lines")
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def _lines(corpus: str = "model_lines") -> list[dict[str, Any]]:
    return json.loads((DATA / f"{corpus}.json").read_text(encoding="utf-8"))["lines"]


def _cases() -> list[Any]:
    return [pytest.param(line, id=f"{corpus}:{line['id']}") for corpus in CORPORA for line in _lines(corpus)]


def _run(tmp_path: Path, case: dict[str, Any]) -> InteractionResult:
    """The case's earlier exchanges (each must be heard as the model wrote it), then its line."""
    npc = case["npc"]
    earlier = [dialogue for _, dialogue in case["earlier"]]
    reply = say(case["dialogue"], mutations=[case["grants"]] if "grants" in case else None)
    backend = ScriptedBackend({npc: [say(d) for d in earlier] + [reply] * 3}, special_tokens=SPECIALS)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite", case.get("state")), backend)
    for player, dialogue in case["earlier"]:
        before = pipeline.interact(ask(player, npc=npc, scene="eldmoor"))
        assert before.outcome is InteractionOutcome.VALIDATED and before.dialogue == dialogue, before.receipt.attempts
    return pipeline.interact(ask(case["player"], npc=npc, scene="eldmoor"))


def _first_rules(result: InteractionResult) -> set[str]:
    first = result.receipt.attempts[0]
    return {f.rule_id or "" for f in first.failures} | {f.kind.value for f in first.findings if f.action.value != "mapped"}


@pytest.mark.parametrize("case", _cases())
def test_a_labelled_model_line(case: dict[str, Any], tmp_path: Path) -> None:
    result = _run(tmp_path, case)
    rules = _first_rules(result)
    if case["id"].startswith("unchecked_"):
        # broken in a way no check judges: whatever happens, no check meant for something else fires
        assert not rules & {"parroting", "repeats_itself", "repeated_sentence", "assistant_register", "narrates_the_player"}, (
            rules
        )
        return
    if case["expect"] is None:
        assert result.outcome is InteractionOutcome.VALIDATED and not result.receipt.attempts[0].failures, rules
        assert result.dialogue == case["dialogue"]
    else:
        # a repeated sentence beside new ones is stripped, not the whole line failed
        caught = {case["expect"], "repeated_sentence"} if case["expect"] == "repeats_itself" else {case["expect"]}
        assert caught & rules, (case["id"], rules)
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


def test_the_coder_corpus_holds_both_models_and_what_they_break() -> None:
    lines = _lines("coder_lines")
    assert len(lines) >= 100
    assert {line["model"] for line in lines} == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"}
    counts = Counter(line["category"].split(":")[0] for line in lines)
    for category in ("ordinary", "assistant's register", "narrates the player", "agrees with a false claim", "unchecked"):
        assert counts[category] >= 1, category
