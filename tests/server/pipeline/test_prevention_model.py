"""Prevent, then verify, on the real embedded model (issue 57): a word a designer forbids, which
the model would have written, is kept out while the line is decoded; the first attempt passes,
the receipt says what was kept out and why, and the same request writes the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipeline_helpers import ask
from stores import open_store

from loreguard.schemas import ExpectancyRule, InteractionResult
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.parsing import parse_output
from loreguard.server.pipeline.retry import RetryPolicy
from loreguard.text.phrases import contains_phrase
from loreguard.text.words import word_tokens

pytestmark = pytest.mark.model

LINE = "Tell me about the town, guard."


def _interact(backend: LlamaCppBackend, path: Path, *, forbidden: str = "", prevent: bool = True) -> InteractionResult:
    npcs = demo_npcs()
    if forbidden:
        rule = ExpectancyRule.model_validate(
            {
                "id": "no_word",
                "type": "prohibition",
                "prompt_injection": "say that word",
                "checks": {"forbidden_phrases": [forbidden]},
            }
        )
        npcs = tuple(p.model_copy(update={"rules": (*p.rules, rule)}) if p.id == "guard" else p for p in npcs)
    store = open_store(path, world=demo_world(), npcs=npcs)
    config = PipelineConfig(gate=GateConfig(prevent_in_sampler=prevent), retry=RetryPolicy(max_attempts=1))
    return GovernancePipeline(store, backend, config).interact(ask(LINE, npc="guard"))


def _dialogue(result: InteractionResult) -> str:
    data = parse_output(result.receipt.attempts[0].raw_output).data or {}
    return str(data.get("dialogue", ""))


def test_a_forbidden_word_the_model_would_write_is_kept_out(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    # The rule's words are not in the prompt, so a rule forbidding a word nobody says gives the
    # very prompt the guarded run gets: what the model writes there is what it would write.
    free = _dialogue(_interact(reproducible_backend, tmp_path / "free.sqlite", forbidden="zyxxy", prevent=False))
    asked = set(word_tokens(LINE))
    word = next(w for w in word_tokens(free) if len(w) >= 4 and w not in asked)

    guarded = _interact(reproducible_backend, tmp_path / "guarded.sqlite", forbidden=word)
    attempt = guarded.receipt.attempts[0]
    assert not contains_phrase(_dialogue(guarded), word), (free, _dialogue(guarded))
    assert "no_word" not in {f.rule_id for f in attempt.failures}
    assert ("no_word", word) in {(p.rule_id, p.evidence) for p in attempt.prevented}

    again = _interact(reproducible_backend, tmp_path / "again.sqlite", forbidden=word)
    assert again.receipt.attempts[0].raw_output == attempt.raw_output
    assert again.receipt.attempts[0].prevented == attempt.prevented
