"""Streaming with the real embedded model: text grows token by token, a stop frees the slot at
once, and a streamed interaction's chunks add up to its validated reply."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask

from loreguard.schemas import InteractionOutcome
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.running.streaming import ReleasedChunk, StreamSession, continuation_prefix, partial_dialogue

pytestmark = pytest.mark.model


def _first_request(backend: LlamaCppBackend, tmp_path: Path):  # type: ignore[no-untyped-def]
    recording = Recording(backend)
    GovernancePipeline(demo_store(tmp_path / "first.sqlite"), recording).interact(ask("When does the gate close?"))
    return recording.calls[0][0]


@pytest.mark.parametrize("engine", ["llama_backend", "reproducible_backend"])
def test_the_text_grows_and_a_stop_ends_the_generation(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    backend: LlamaCppBackend = request.getfixturevalue(engine)
    gen_request = _first_request(backend, tmp_path)
    seen: list[str] = []

    def observe(text: str) -> bool:
        seen.append(text)
        return len(seen) < 6  # stop after six pieces

    stopped = backend.generate_streaming(gen_request, observe)
    assert stopped.finish_reason == "aborted"
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:], strict=False))
    # Stopped at the step it was told to (a step may carry a run of forced tokens too).
    assert stopped.text.startswith(seen[-1]) and stopped.tokens_generated <= 16
    # The slot is free again: a full generation runs, and its text begins like the stopped one
    # did only if numerics allow; it must simply finish.
    whole = backend.generate_streaming(gen_request, lambda text: True)
    assert whole.finish_reason == "stop" and whole.tokens_generated > stopped.tokens_generated
    if backend.engine is not None:
        assert not backend.engine._active  # nothing left decoding


def test_a_streamed_interaction_releases_what_it_replies(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    pipeline = GovernancePipeline(demo_store(tmp_path / "memory.sqlite"), llama_backend)
    for line in ("Good evening. When does the gate close?", "What news from the hills?", "Can you open the gate?"):
        chunks: list[ReleasedChunk] = []
        result = pipeline.interact(ask(line), stream=StreamSession(emit=chunks.append))
        assert result.outcome in (InteractionOutcome.VALIDATED, InteractionOutcome.FALLBACK)
        assert "".join(c.text for c in chunks) == result.dialogue
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        model_chunks = [c.attempt for c in chunks if c.attempt]
        assert model_chunks == sorted(model_chunks)
        for attempt in result.receipt.attempts:
            assert attempt.stream is not None
            if not attempt.stream.aborted:
                assert partial_dialogue(attempt.raw_output) is not None  # dialogue first, as the grammar says
            given = result.dialogue[: attempt.stream.continued_chars]
            assert attempt.raw_output.startswith(
                continuation_prefix(given) if attempt.stream.continued_chars else '{"dialogue": "'
            )


def test_a_reply_cut_after_its_first_sentence_goes_on_from_it(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    """The embedded model answers "Good day. Who are you?" by echoing it (npc_3 does, with the
    sampler's seeds as they are): the stream releases "Good day." and is cut at the echo. The retry is given "Good day." to start with and may not
    begin with the echoed sentence: the reply goes on in new words instead of ending there."""
    from loreguard.memory import MemoryStore
    from loreguard.server.bench.inference import bench_profiles, bench_world

    store = MemoryStore(tmp_path / "memory.sqlite")
    store.load_world(bench_world())
    for profile in bench_profiles(4, 8):
        store.register_npc(profile)
    pipeline = GovernancePipeline(store, reproducible_backend)
    continued = []
    for npc in ("npc_0", "npc_1", "npc_2", "npc_3"):
        chunks: list[ReleasedChunk] = []
        result = pipeline.interact(ask("Good day. Who are you?", npc=npc), stream=StreamSession(emit=chunks.append))
        assert result.outcome is InteractionOutcome.VALIDATED
        assert "".join(c.text for c in chunks) == result.dialogue
        for before, attempt in zip(result.receipt.attempts, result.receipt.attempts[1:], strict=False):
            if attempt.stream is not None and attempt.stream.continued_chars:
                assert before.stream is not None and before.stream.cut is not None
                given = result.dialogue[: attempt.stream.continued_chars]
                assert attempt.raw_output.startswith(continuation_prefix(given)) and attempt.stream.avoided_start
                continued.append((given, result.dialogue))
    assert continued, "no reply was cut after a release: the test no longer shows a continuation"
    assert any(len(whole) > len(given) for given, whole in continued)  # it went on past the released words
