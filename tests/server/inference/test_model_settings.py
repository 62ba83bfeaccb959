"""Per-model settings the catalogue hands the llama.cpp backend: stop tokens and penalties."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask

from loreguard.schemas.prompt import Prompt
from loreguard.server.inference import BackendError
from loreguard.server.inference.base import GenerationRequest
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.pipeline import GovernancePipeline

pytestmark = pytest.mark.model

PROMPT = Prompt(
    static_prefix="You are a town guard. Answer in two or three full sentences.",
    dynamic_suffix="Tell me about the town and its gate.",
    manifest="",
    context_keys=(),
)


def _text(**settings: object) -> str:
    backend = LlamaCppBackend(LlamaCppConfig(reproducible=True, n_ctx=1024, temperature=0, **settings))  # type: ignore[arg-type]
    try:
        return backend.generate(GenerationRequest(npc_id="guard", prompt=PROMPT, seed=7, max_tokens=48)).text
    finally:
        backend.close()


def test_a_stop_token_ends_the_generation_where_it_appears() -> None:
    free = _text()
    assert "." in free, free
    stopped = _text(stop_tokens=(".",))
    assert "." not in stopped and free.startswith(stopped) and len(stopped) < len(free)


def test_a_stop_token_that_is_not_one_token_is_refused() -> None:
    with pytest.raises(BackendError, match="is not one token"):
        _text(stop_tokens=("certainly not a single token",))


def test_penalties_change_the_text_and_keep_it_a_function_of_the_seed() -> None:
    penalised = _text(repeat_penalty=1.5, presence_penalty=0.5)
    assert penalised == _text(repeat_penalty=1.5, presence_penalty=0.5)
    assert penalised != _text()


def test_penalties_with_the_output_grammar_give_a_governed_reply(tmp_path: Path) -> None:
    """Constrained decoding keeps the penalty history too (tokens the grammar chose instead)."""
    backend = LlamaCppBackend(LlamaCppConfig(reproducible=True, n_ctx=4096, repeat_penalty=1.3, presence_penalty=0.3))
    try:
        recording = Recording(backend)
        result = GovernancePipeline(demo_store(tmp_path / "memory.sqlite"), recording).interact(ask("Who are you?"))
        assert recording.calls and recording.calls[0][0].output_schema is not None
        assert result.dialogue.strip() and result.attempts >= 1
    finally:
        backend.close()
