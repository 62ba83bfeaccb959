"""Warm-ups with the real embedded model: a warmed NPC's first turn evaluates only its new
message, on both engines; a warm-up gives way to a generation and resumes, takes only free room;
memory is untouched."""

from __future__ import annotations

import threading
from array import array
from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask
from waiting import wait_for

from loreguard.schemas.prompt import NEW_MESSAGE_HEADINGS
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.pipeline import GovernancePipeline

pytestmark = pytest.mark.model


def test_a_warmed_npcs_first_turn_evaluates_only_its_new_message(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    store = demo_store(tmp_path / "m.sqlite")
    recording = Recording(llama_backend)
    pipeline = GovernancePipeline(store, recording)
    llama_backend.invalidate("guard")  # other tests' turns of the guard
    before = store.memory_hash()

    prompt = pipeline.warm_prompt("guard")
    warmed = llama_backend.warm("guard", prompt)
    # A few template tokens at the start may come from another NPC's sequence (other tests').
    assert warmed.outcome == "warmed" and warmed.tokens - 16 < warmed.tokens_evaluated <= warmed.tokens
    assert llama_backend.warm("guard", prompt).outcome == "already"
    assert store.memory_hash() == before and store.interactions("guard") == 0

    pipeline.interact(ask("When does the gate close?", npc="guard"))
    request, first = recording.calls[0]
    tokens = llama_backend.tokenize_prompt(request.prompt)
    whole = tokens.prefix + tokens.suffix
    warm = llama_backend.warm_tokens(prompt)
    # The warmed tokens are exactly how the first prompt starts, and all of them were reused.
    assert whole[: warmed.tokens] == warm.prefix + warm.suffix
    assert first.tokens_cached == warmed.tokens
    assert first.tokens_evaluated == len(whole) - warmed.tokens
    # What was evaluated is the new message (the system message and rules were not), less the
    # `###` its heading opens with, which every new message shares and the warm-up took too.
    new = b"".join(llama_backend.native_model.piece(t) for t in whole[warmed.tokens :]).decode()
    assert ("###" + new).startswith(NEW_MESSAGE_HEADINGS) and "When does the gate close?" in new
    assert len(new) < len(request.prompt.player_turn) + 40  # the new message and the template's end


def test_a_warm_up_gives_way_to_a_generation_and_resumes(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    engine = llama_backend.engine
    assert engine is not None
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), llama_backend)
    llama_backend.invalidate("merchant")
    tokens = llama_backend.warm_tokens(pipeline.warm_prompt("merchant"))
    # Several turns' worth of the merchant's text: many prefill chunks, so the generation below
    # arrives while the warm-up is still running.
    prompt = array("i", (tokens.prefix + tokens.suffix) * 4)
    result: list[object] = []
    warming = threading.Thread(target=lambda: result.append(engine.warm("merchant", prompt)))
    start = engine.stats.warm_tokens_evaluated
    warming.start()
    wait_for(lambda: engine.stats.warm_tokens_evaluated > start, "the warm-up's first chunk")
    llama_backend.invalidate("guard")
    answered = pipeline.interact(ask("Good evening.", npc="guard"))
    warming.join(120)
    assert answered.dialogue
    (job,) = result
    assert job.finish == "warmed" and job.yielded >= 1  # type: ignore[attr-defined]
    # It resumed from its own tokens: nothing was evaluated twice (a few template tokens at the
    # start may have come from another NPC's sequence).
    assert len(prompt) - 16 < job.evaluated <= len(prompt)  # type: ignore[attr-defined]
    assert engine.warm("merchant", prompt).finish == "already"


def test_a_warmed_prefix_is_restored_by_the_reproducible_engine(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    recording = Recording(reproducible_backend)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
    reproducible_backend.invalidate("guard")
    warmed = reproducible_backend.warm("guard", pipeline.warm_prompt("guard"))
    assert warmed.outcome == "warmed"
    pipeline.interact(ask("When does the gate close?", npc="guard"))
    request, first = recording.calls[0]
    tokens = reproducible_backend.tokenize_prompt(request.prompt)
    assert first.tokens_cached == len(tokens.prefix) == warmed.tokens
    assert first.tokens_evaluated == len(tokens.suffix)


def test_warm_ups_take_only_free_room_and_say_when_there_is_none(tmp_path: Path) -> None:
    # One generation slot and room for one resident sequence besides it.
    backend = LlamaCppBackend(LlamaCppConfig(n_threads=2, parallel=1, resident_sequences=1))
    try:
        pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
        assert backend.warm("guard", pipeline.warm_prompt("guard")).outcome == "warmed"
        refused = backend.warm("merchant", pipeline.warm_prompt("merchant"))
        assert refused.outcome == "no_room" and refused.tokens_evaluated == 0
        assert backend.engine is not None and backend.engine.resident_owners() == ["guard"]  # nothing was evicted
        # An interaction may still evict (LRU) as ever: the merchant answers.
        assert pipeline.interact(ask("Good evening.", npc="merchant")).dialogue
    finally:
        backend.close()


def test_a_warm_up_alongside_is_prefilled_in_the_steps_of_a_generation_decoding(
    llama_backend: LlamaCppBackend, tmp_path: Path
) -> None:
    """A scene's next speaker: its prompt is evaluated while the current line is generated, in
    the same steps; a plain warm-up waits for the engine to be idle."""
    engine = llama_backend.engine
    assert engine is not None
    recording = Recording(llama_backend)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
    pipeline.interact(ask("Tell me about the gate, the town and the river.", npc="guard"))
    request, _ = recording.calls[0]
    tokens = llama_backend.warm_tokens(pipeline.warm_prompt("merchant"))
    prompt = array("i", tokens.prefix + tokens.suffix)

    def generate_while_warming(alongside: bool) -> tuple[int, int, object]:
        llama_backend.invalidate("merchant")
        jobs: list[object] = []
        warming = threading.Thread(target=lambda: jobs.append(engine.warm("merchant", prompt, alongside=alongside)))
        before = engine.stats.warm_tokens_evaluated
        during: list[int] = []

        def observe(text: str) -> bool:
            if not warming.is_alive() and not jobs:
                warming.start()  # the generation is decoding now
            during.append(engine.stats.warm_tokens_evaluated)
            return True

        llama_backend.generate_streaming(request, observe)
        warming.join(120)
        return before, during[-1], jobs[0]

    before, last, job = generate_while_warming(alongside=True)
    assert last > before  # chunks of the warm-up rode in the generation's steps
    assert job.finish == "warmed" and job.yielded == 0  # type: ignore[attr-defined]
    assert engine.warm("merchant", prompt).finish == "already"
    before, last, job = generate_while_warming(alongside=False)
    assert last == before  # it waited for the engine to be idle
    assert job.finish == "warmed"  # type: ignore[attr-defined]
