"""Evaluated prompts on disk with the real embedded model: a relaunch restores what the last launch
evaluated, on both engines, the reproducible one writing the same line either way; a file that
does not fit (truncated, another model, another prompt, another KV layout) is rebuilt, never
loaded; `loreguard warm`'s shipped files spare a new save's first launch."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from pipeline_helpers import ask
from stores import open_store

from loreguard.schemas import InteractionResult
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.prompt_states import decode, encode, file_name
from loreguard.server.pipeline import GovernancePipeline

pytestmark = pytest.mark.model


@contextmanager
def launch(tmp_path: Path, name: str, **settings: object) -> Iterator[tuple[LlamaCppBackend, GovernancePipeline]]:
    """One 'launch': a backend with its prompt cache in tmp_path/cache and a fresh save."""
    config = LlamaCppConfig(n_threads=os.cpu_count() or 1, prompt_cache_dir=str(tmp_path / "cache"), **settings)  # type: ignore[arg-type]
    backend = LlamaCppBackend(config)
    store = open_store(tmp_path / f"{name}.sqlite", world=demo_world(), npcs=demo_npcs())
    try:
        yield backend, GovernancePipeline(store, backend)
    finally:
        backend.close()
        store.close()


def first_line(pipeline: GovernancePipeline) -> InteractionResult:
    return pipeline.interact(ask("When does the gate close?", npc="guard"))


@pytest.mark.parametrize("reproducible", [False, True], ids=["batched", "reproducible"])
def test_a_relaunch_restores_the_warmed_prompt_instead_of_evaluating_it(tmp_path: Path, reproducible: bool) -> None:
    with launch(tmp_path, "first", reproducible=reproducible) as (backend, pipeline):
        cold = backend.warm("guard", pipeline.warm_prompt("guard"))
        evaluated = first_line(pipeline)
    assert cold.tokens_evaluated == cold.tokens and cold.tokens_restored == 0
    with launch(tmp_path, "second", reproducible=reproducible) as (backend, pipeline):
        warm = backend.warm("guard", pipeline.warm_prompt("guard"))
        restored = first_line(pipeline)
    assert warm.outcome == "warmed" and warm.tokens_evaluated == 0 and warm.tokens_restored == warm.tokens
    # The line's prompt evaluated only its new message either way, and the line is the same.
    assert restored.receipt.attempts[0].tokens_evaluated == evaluated.receipt.attempts[0].tokens_evaluated
    if reproducible:
        assert restored.receipt.attempts[0].raw_output == evaluated.receipt.attempts[0].raw_output


def test_a_first_line_without_a_warm_up_is_kept_for_the_next_launch(tmp_path: Path) -> None:
    with launch(tmp_path, "first") as (_, pipeline):
        first = first_line(pipeline)
    with launch(tmp_path, "second") as (backend, pipeline):
        again = first_line(pipeline)
        engine = backend.engine
        assert engine is not None and engine.stats.prompt_tokens_from_disk > 0
    assert again.receipt.attempts[0].tokens_evaluated < first.receipt.attempts[0].tokens_evaluated / 4


def test_a_relaunch_after_a_conversation_restores_the_conversation_too(tmp_path: Path) -> None:
    with launch(tmp_path, "save") as (backend, pipeline):
        backend.warm("guard", pipeline.warm_prompt("guard"))
        (attempt,) = first_line(pipeline).receipt.attempts
    # The same save, launched again: the guard's prompt now holds that exchange, and the state
    # the last launch ended with holds it too.
    with launch(tmp_path, "save") as (backend, pipeline):
        prompt = pipeline.warm_prompt("guard")
        assert "When does the gate close?" in str(prompt.model_dump())
        warm = backend.warm("guard", prompt)
    # All of the line's prompt comes back, and of the reply as much as the model wrote it in the
    # tokens its text reads back as: where it chose other pieces for the same characters (a
    # forced run, a number), the rest of the reply is evaluated again, and a template token.
    asked = attempt.tokens_evaluated + attempt.tokens_cached
    assert warm.tokens_restored >= asked and warm.tokens_evaluated <= attempt.tokens_generated + 16, (warm, attempt)


def test_the_reproducible_engines_files_serve_the_batched_engine_whole(tmp_path: Path) -> None:
    with launch(tmp_path, "first", reproducible=True) as (backend, pipeline):
        backend.warm("guard", pipeline.warm_prompt("guard"))
    with launch(tmp_path, "second") as (backend, pipeline):
        warm = backend.warm("guard", pipeline.warm_prompt("guard"))
    assert warm.tokens_evaluated == 0 and warm.tokens_restored == warm.tokens


def _rewrite(path: Path, **maker: str) -> None:
    entry = decode(path.read_bytes())
    path.write_bytes(encode(replace(entry, maker=replace(entry.maker, **maker))))


# Each engine meets two of the four (both read files through the same checks).
@pytest.mark.parametrize(
    ("damage", "reason", "reproducible"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "truncated", False),
        (lambda p: _rewrite(p, model_sha256="0" * 64), "another model file", True),
        (lambda p: _rewrite(p, kv_layout="k=q8_0 v=q8_0 fa=-1"), "another KV cache layout", False),
        (lambda p: _rewrite(p, llama_build="0.0.1"), "another llama.cpp build", True),
    ],
    ids=["truncated-batched", "another-model-reproducible", "another-kv-type-batched", "another-build-reproducible"],
)
def test_a_file_that_does_not_fit_is_rebuilt_never_loaded(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage,
    reason: str,
    reproducible: bool,  # type: ignore[no-untyped-def]
) -> None:
    with launch(tmp_path, "first", reproducible=reproducible) as (backend, pipeline):
        backend.warm("guard", pipeline.warm_prompt("guard"))
    path = tmp_path / "cache" / file_name("guard")
    damage(path)
    with (
        caplog.at_level(logging.WARNING, "loreguard.prompt_states"),
        launch(tmp_path, "second", reproducible=reproducible) as (
            backend,
            pipeline,
        ),
    ):
        warm = backend.warm("guard", pipeline.warm_prompt("guard"))
    assert warm.tokens_restored == 0 and warm.tokens_evaluated == warm.tokens
    (line,) = [r.getMessage() for r in caplog.records if "guard" in r.getMessage()]
    assert reason in line
    assert decode(path.read_bytes()).maker.model_sha256 != "0" * 64  # replaced by a good one
    with launch(tmp_path, "third", reproducible=reproducible) as (backend, pipeline):
        assert backend.warm("guard", pipeline.warm_prompt("guard")).tokens_evaluated == 0


def test_another_prompt_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with launch(tmp_path, "first") as (backend, pipeline):
        backend.warm("guard", pipeline.warm_prompt("guard"))
    guard = next(p for p in demo_npcs() if p.id == "guard")
    changed = guard.model_copy(update={"persona": "A tired old soldier who has seen too many winters. " + guard.persona})
    with caplog.at_level(logging.WARNING, "loreguard.prompt_states"), launch(tmp_path, "second") as (backend, pipeline):
        assert pipeline.store.register_npc(changed).committed
        warm = backend.warm("guard", pipeline.warm_prompt("guard"))
    assert warm.tokens_restored == 0 and warm.tokens_evaluated > 0
    assert any("another prompt" in r.getMessage() for r in caplog.records)


def test_loreguard_warm_ships_files_a_new_save_restores(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    done = subprocess.run(
        [sys.executable, "-m", "loreguard.server.cli", "warm", "--out", str(shipped), "--threads", "2"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "guard: " in done.stdout and "merchant: " in done.stdout and f"prompts: {shipped}" in done.stdout
    with launch(tmp_path, "player", shipped_prompts=(str(shipped),)) as (backend, pipeline):
        for npc in ("guard", "merchant"):
            warm = backend.warm(npc, pipeline.warm_prompt(npc))
            assert warm.tokens_evaluated == 0 and warm.tokens_restored == warm.tokens
    assert sorted(p.name for p in shipped.glob("*.lgkv")) == sorted([file_name("guard"), file_name("merchant")])
    assert not list((tmp_path / "cache").glob("*.lgkv"))  # nothing new was evaluated, nothing written
