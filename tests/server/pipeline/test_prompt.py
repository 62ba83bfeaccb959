"""Stage 4-5: snapshot immutability and prompt assembly under bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import rich_guard_profile, say
from pipeline_helpers import ask, make_pipeline
from pydantic import ValidationError

from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite, UpsertBelief
from loreguard.schemas.prompt import NEW_MESSAGE_HEADINGS
from loreguard.server.pipeline import PipelineConfig, UnknownNpcError
from loreguard.server.pipeline.expectancy import ConstraintSet
from loreguard.server.pipeline.prompt import PromptBoundary, assemble_prompt, character_frame


def _pipeline_with_memory(tmp_path: Path, **profile_overrides: object):
    profile = rich_guard_profile(**profile_overrides)
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Aye.")] * 4, profile=profile)
    writes = [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=AppendEpisodic(
                scope="guard", text=f"Memory {i} about the river and the king.", significance=i / 10, at_interaction=0
            ),
        )
        for i in range(10)
    ] + [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=UpsertBelief(scope="guard", belief_id=f"b{i}", content=f"Belief {i} about the king.", confidence=0.3 + i / 20),
        )
        for i in range(8)
    ]
    assert pipeline.store.apply(writes).committed
    return pipeline, backend


def test_bounds_and_manifest(tmp_path: Path) -> None:
    pipeline, backend = _pipeline_with_memory(tmp_path, bounds={"max_episodic": 3, "max_beliefs": 2})
    pipeline.interact(ask("Who is the king?"))
    prompt = backend.requests[0].prompt
    assert "[manifest] task=lore_question canonical=3 world_state=0 beliefs=2/8 episodic=3/10" in prompt.manifest
    assert prompt.full.count("- Belief ") == 2 and prompt.full.count("- Memory ") == 3
    assert "- Memory 9 about" in prompt.full  # most significant first
    assert prompt.context_keys[:3] == ("canonical:river", "canonical:gate_hours", "canonical:king_name")


def test_truncation_drops_episodic_then_beliefs_never_facts(tmp_path: Path) -> None:
    # room for everything but two episodic memories, whatever the character frame's length
    budget = 1900 + len(character_frame("Brom the Gate Guard"))
    pipeline, backend = _pipeline_with_memory(tmp_path, bounds={"max_episodic": 10, "max_beliefs": 8, "max_chars": budget})
    pipeline.interact(ask("Who is the king?"))
    prompt = backend.requests[0].prompt
    assert len(prompt.full) <= budget and not prompt.over_budget
    assert "The king of Eldmoor is named Arthur." in prompt.full
    assert prompt.full.count("- Memory ") < 10
    assert prompt.full.count("- Belief ") == 8  # beliefs go only once episodic memories are gone
    assert "- Memory 9 about" in prompt.full  # the lowest-scored went first


def test_over_budget_keeps_facts_and_says_so(tmp_path: Path) -> None:
    pipeline, backend = _pipeline_with_memory(tmp_path, bounds={"max_chars": 500})
    pipeline.interact(ask("Who is the king?"))
    prompt = backend.requests[0].prompt
    assert prompt.over_budget and "The king of Eldmoor is named Arthur." in prompt.full
    assert "- Memory " not in prompt.full and "- Belief " not in prompt.full


@pytest.mark.parametrize("boundary", list(PromptBoundary))
def test_boundaries_split_the_same_bytes(tmp_path: Path, boundary: PromptBoundary) -> None:
    pipeline, backend = _pipeline_with_memory(tmp_path)
    pipeline.config = PipelineConfig(prompt_boundary=boundary)
    pipeline.interact(ask("Who is the king?"))
    prompt = backend.requests[0].prompt
    assert prompt.full.startswith(prompt.static_prefix + prompt.dynamic_suffix)
    markers = {
        PromptBoundary.AFTER_SYSTEM: "### Facts",
        PromptBoundary.AFTER_CANONICAL: "### World state",
        PromptBoundary.AFTER_WORLD_STATE: "### Rules",
        PromptBoundary.AFTER_CONSTRAINTS: "### What you believe",
    }
    assert markers[boundary] not in prompt.static_prefix


@pytest.mark.parametrize("boundary", list(PromptBoundary))
@pytest.mark.parametrize("memories", [True, False])
def test_a_new_message_opens_with_a_known_heading(tmp_path: Path, boundary: PromptBoundary, memories: bool) -> None:
    """What a warm-up relies on: the text it caches is followed by one of these headings."""
    if memories:
        pipeline, backend = _pipeline_with_memory(tmp_path)
    else:
        pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Aye.")] * 2)
    pipeline.config = PipelineConfig(prompt_boundary=boundary)
    pipeline.interact(ask("Who is the king?"))
    pipeline.interact(ask("And the queen?"))
    for request in backend.requests:
        assert request.prompt.player_turn.startswith(NEW_MESSAGE_HEADINGS)


def test_the_warm_prompt_is_the_next_prompt_less_its_new_message_and_writes_nothing(tmp_path: Path) -> None:
    pipeline, backend = _pipeline_with_memory(tmp_path)
    pipeline.interact(ask("Who is the king?"))
    before = pipeline.store.memory_hash()
    warm = pipeline.warm_prompt("guard")
    assert pipeline.store.memory_hash() == before and pipeline.store.interactions("guard") == 1
    pipeline.interact(ask("And the queen?"))
    nxt = backend.requests[-1].prompt
    assert warm.player_turn == "" and nxt.player_turn
    assert (warm.static_prefix, warm.dynamic_suffix, warm.turns) == (nxt.static_prefix, nxt.dynamic_suffix, nxt.turns)
    assert nxt.messages()[:-1] == warm.messages()[:-1]
    assert nxt.messages()[-1]["content"].startswith(warm.messages()[-1]["content"])
    with pytest.raises(UnknownNpcError):
        pipeline.warm_prompt("nobody")


def test_snapshot_is_immutable_and_for_retry(tmp_path: Path) -> None:
    pipeline, backend = _pipeline_with_memory(tmp_path)
    captured = {}
    original = pipeline._prepare

    def spy(ctx):
        run = original(ctx)
        captured["snapshot"] = run.first_snapshot
        return run

    pipeline._prepare = spy  # type: ignore[method-assign]
    pipeline.interact(ask("hi"))
    snap = captured["snapshot"]
    with pytest.raises(ValidationError):
        snap.attempt = 5  # type: ignore[misc]
    retry = snap.for_retry(ConstraintSet(), "fix it")
    assert (retry.attempt, retry.repair, snap.attempt) == (2, "fix it", 1)
    assert retry.snapshot_hash() != snap.snapshot_hash()
    assert snap.snapshot_hash() == snap.model_copy().snapshot_hash()
    last = retry.for_retry(ConstraintSet())
    assert retry.can_retry and not last.can_retry
    assert "### Correction\nfix it" in assemble_prompt(retry).full


@pytest.mark.parametrize(
    ("n", "bound", "first"),
    [(0, 4, 0), (4, 4, 0), (5, 4, 2), (6, 4, 2), (7, 4, 4), (8, 4, 4), (9, 4, 6), (3, 1, 2), (10, 6, 6), (13, 6, 9)],
)
def test_the_conversation_window_moves_in_half_steps(n: int, bound: int, first: int) -> None:
    from loreguard.server.pipeline.turn.transcript import conversation_window

    assert conversation_window(n, bound) == first
    assert n == 0 or bound // 2 < n - first <= bound or n <= bound


def test_a_long_conversation_keeps_its_prompt_prefix_for_several_turns(tmp_path: Path) -> None:
    outputs = [say(f"Line {i}.") for i in range(10)]
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", outputs)
    for i in range(10):
        pipeline.interact(ask(f"Question {i}?"))
    chats = [r.prompt.messages() for r in backend.requests]
    # Past the bound (4 exchanges), the window drops two old turns every other turn: in between,
    # each turn's chat is the previous one, then the model's own reply, then the new message.
    extends = [
        later[: len(earlier)] == earlier and later[len(earlier)] == {"role": "assistant", "content": output}
        for earlier, later, output in zip(chats, chats[1:], outputs, strict=False)
    ]
    assert extends[:4] == [True] * 4 and extends.count(True) >= 6
    assert max(len(chat) for chat in chats) == 1 + 2 * 4 + 1  # system, 4 turns, the new message


def test_a_repeat_turn_replays_the_turn_as_it_was_sent_and_written(tmp_path: Path) -> None:
    """Byte for byte, the player's message with its context and the reply with its approved
    changes, so the engine can reuse the tokens; a change canon now contradicts is not replayed,
    and what a replayed reply wrote is not listed again among the memories."""
    note = {"kind": "append_episodic", "text": "The player asked about the gate.", "significance": 0.4}
    canon = {
        "kind": "transform_belief",
        "target": "king_name",
        "content": "The king keeps a fine horse.",
        "confidence": 0.9,
        "sentiment": 0.0,
    }
    first, second = say("The gate shuts at dusk.", mutations=[note]), say("Aye.", mutations=[note, canon])
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [first, second, say("Good day.")])
    for question in ("When does the gate close?", "Who is the king?", "Thanks."):
        pipeline.interact(ask(question))
    first_prompt, last = backend.requests[0].prompt, backend.requests[-1].prompt
    chat = last.messages()
    assert chat[1]["content"] == first_prompt.messages()[1]["content"]
    assert chat[2] == {"role": "assistant", "content": first}
    assert '"The king keeps a fine horse."' not in chat[4]["content"] and json.loads(chat[4]["content"])["mutations"] == [note]
    assert "The player asked about the gate." not in chat[-1]["content"]


def test_a_reply_in_another_layout_is_replayed_in_the_models_bytes(tmp_path: Path) -> None:
    """Same value, other bytes (spacing, key order, number form): the model's own text is kept,
    since those are the tokens the engine has cached; a lenient parse is written anew."""
    odd = '{"emotion":"happy","dialogue":"Welcome.","intent":"none","mutations":[]}'
    lenient = 'Sure! {"dialogue": "Hm.", "emotion": "neutral", "mutations": []}'
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [odd, lenient, say("Bye.")])
    for question in ("Hello?", "Hm?", "Bye?"):
        pipeline.interact(ask(question))
    chat = backend.requests[-1].prompt.messages()
    assert chat[2]["content"] == odd
    assert chat[4]["content"] == say("Hm.")


def test_a_turn_accepted_on_a_retry_is_replayed_with_its_correction(tmp_path: Path) -> None:
    """The accepted attempt's message, correction included, is what the engine has cached."""
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", ["no json here", say("Fine."), say("Bye.")])
    pipeline.interact(ask("Hello?"))
    pipeline.interact(ask("Bye?"))
    accepted, later = backend.requests[1].prompt.messages(), backend.requests[2].prompt.messages()
    assert "### Correction" in accepted[-1]["content"]
    assert later[: len(accepted)] == accepted and later[len(accepted)] == {"role": "assistant", "content": say("Fine.")}
