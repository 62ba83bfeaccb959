"""The incremental gate: sentences released only once passed, never a released word rejected."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from factories import rich_guard_profile, say
from pipeline_helpers import ask, make_pipeline

from loreguard.schemas import InteractionOutcome
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest, Observer
from loreguard.server.pipeline import InteractionCancelled, PipelineConfig
from loreguard.server.pipeline.gate import run_gate
from loreguard.server.pipeline.running.streaming import (
    ReleasedChunk,
    StreamingConfig,
    StreamSession,
    chunk_ends,
    continuation_prefix,
    partial_dialogue,
)


def session() -> tuple[StreamSession, list[ReleasedChunk]]:
    chunks: list[ReleasedChunk] = []
    return StreamSession(emit=chunks.append), chunks


def test_partial_dialogue_decodes_as_it_grows() -> None:
    raw = json.dumps({"dialogue": 'Hold, "friend".\nThe gate é shuts.', "emotion": "neutral", "mutations": []})
    assert partial_dialogue(raw) == ('Hold, "friend".\nThe gate é shuts.', True)
    for n in range(len(raw)):
        found = partial_dialogue(raw[:n])
        if found is not None:
            assert 'Hold, "friend".\nThe gate é shuts.'.startswith(found[0])
    assert partial_dialogue('{"dialogue": "a\\') == ("a", False)  # half an escape waits
    assert partial_dialogue('{"dialogue": "a\\u00') == ("a", False)
    assert partial_dialogue('{"emotion": "happy", "dialogue": "x"}') is None  # not dialogue-first
    assert partial_dialogue("") is None


def test_chunk_ends_need_the_following_space() -> None:
    assert chunk_ends("One. Two! Three", closed=False) == [4, 9]
    assert chunk_ends("One. Two! Three", closed=True) == [4, 9, 15]
    assert chunk_ends("It costs 3.5 coins", closed=False) == []
    assert chunk_ends('He said "go." Then', closed=False) == [13]


def test_a_clean_reply_streams_sentence_by_sentence(tmp_path: Path) -> None:
    text = "Hail, friend. The north gate opens at dawn. Mind the road."
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say(text)])
    stream, chunks = session()
    result = pipeline.interact(ask("When does the gate open?"), stream=stream)
    assert result.outcome is InteractionOutcome.VALIDATED
    assert [c.text for c in chunks] == ["Hail, friend.", " The north gate opens at dawn.", " Mind the road."]
    assert [c.seq for c in chunks] == [0, 1, 2] and {c.attempt for c in chunks} == {1}
    assert "".join(c.text for c in chunks) == result.dialogue
    record = result.receipt.attempts[0].stream
    assert record is not None and record.cut is None and not record.aborted
    assert [(r.start, r.end) for r in record.releases] == [(0, 13), (13, 43), (43, 58)]


def test_a_failing_sentence_stops_generation_and_the_reply_is_what_was_released(tmp_path: Path) -> None:
    text = "Hail, friend. The dragon burned the mill. Then it flew north and we never saw it again."
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say(text), say("Unused retry.")])
    stream, chunks = session()
    result = pipeline.interact(ask("What happened?"), stream=stream)
    assert [c.text for c in chunks] == ["Hail, friend."]
    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == "Hail, friend."
    assert result.attempts == 1
    attempt = result.receipt.attempts[0]
    assert attempt.stream is not None and attempt.stream.aborted
    assert attempt.stream.cut is not None and "dragon" in attempt.stream.cut.reason
    assert attempt.stream.cut.released_chars == len("Hail, friend.")
    assert len(attempt.raw_output) < len(say(text))  # stopped early: tokens saved
    assert "no_dragon" in {f.rule_id for f in attempt.failures}


def go_on(released: str, rest: str, **fields: object) -> str:
    """What a model given `released` to start with writes after it: the rest of the output."""
    whole = say(released + rest, **fields)  # type: ignore[arg-type]
    prefix = continuation_prefix(released)
    assert whole.startswith(prefix)
    return whole[len(prefix) :]


def continuing_pipeline(path: Path, outputs: list[str], config: PipelineConfig | None = None):  # type: ignore[no-untyped-def]
    pipeline, _ = make_pipeline(path, (), config=config)
    backend = ScriptedBackend(outputs, continues=True)
    pipeline.backend = backend
    return pipeline, backend


def test_continuation_prefix_opens_the_dialogue_string() -> None:
    assert continuation_prefix("Hail, friend.") == '{"dialogue": "Hail, friend.'
    assert continuation_prefix('Say "when".') == '{"dialogue": "Say \\"when\\".'
    assert partial_dialogue(continuation_prefix('Say "when". é')) == ('Say "when". é', False)


def test_a_cut_after_release_is_retried_from_the_released_words(tmp_path: Path) -> None:
    """The words out stand; the retry is given them to start with and goes on after them, with
    the repair in its prompt. Its chunks carry its attempt number; nothing is retracted."""
    first = say("Hail, friend. The dragon burned the mill. Then it flew north.")
    pipeline, backend = continuing_pipeline(tmp_path / "m.db", [first, go_on("Hail, friend.", " The mill is being rebuilt.")])
    stream, chunks = session()
    result = pipeline.interact(ask("What happened?"), stream=stream)
    assert result.outcome is InteractionOutcome.VALIDATED and result.attempts == 2
    assert [(c.text, c.attempt) for c in chunks] == [("Hail, friend.", 1), (" The mill is being rebuilt.", 2)]
    assert [c.seq for c in chunks] == [0, 1]
    assert result.dialogue == "Hail, friend. The mill is being rebuilt." == "".join(c.text for c in chunks)
    assert backend.requests[0].output_prefix == ""
    assert backend.requests[1].output_prefix == '{"dialogue": "Hail, friend.'
    assert backend.requests[1].avoid_start == " The dragon burned the mill."  # not that sentence again
    assert "Your previous reply was rejected" in backend.requests[1].prompt.full and "dragon" in backend.requests[1].prompt.full
    one, two = result.receipt.attempts
    assert one.stream is not None and one.stream.cut is not None and one.stream.continued_chars == 0
    assert two.stream is not None and two.stream.cut is None and two.stream.continued_chars == len("Hail, friend.")
    assert two.raw_output.startswith('{"dialogue": "Hail, friend. The mill')
    assert [(r.seq, r.start, r.end) for r in two.stream.releases] == [(1, 13, 40)]


def test_a_continued_reply_applies_its_own_changes(tmp_path: Path) -> None:
    mutations = [{"kind": "append_episodic", "text": "asked about the mill", "significance": 0.4}]
    outputs = [say("Hail, friend. The dragon came."), go_on("Hail, friend.", " Ask the miller.", mutations=mutations)]
    pipeline, _ = continuing_pipeline(tmp_path / "m.db", outputs)
    result = pipeline.interact(ask("What happened?"), stream=session()[0])
    assert result.dialogue == "Hail, friend. Ask the miller."
    assert [m.kind for m in result.receipt.applied_mutations] == ["append_episodic"]
    assert any(e.text == "asked about the mill" for e in pipeline.store.scope("guard").episodic)


def test_a_retry_after_a_failed_first_sentence_may_not_begin_with_it(tmp_path: Path) -> None:
    """Nothing was released, so the retry starts afresh, but its dialogue may not open the way
    the rejected one did (a small model retried with a new seed often writes the same line)."""
    outputs = [say("The dragon is near. Run."), 'Stay calm. Move along.", "emotion": "neutral", "mutations": []}']
    pipeline, backend = continuing_pipeline(tmp_path / "m.db", outputs)
    stream, chunks = session()
    result = pipeline.interact(ask("Any news?"), stream=stream)
    assert result.dialogue == "Stay calm. Move along." and [c.attempt for c in chunks] == [2, 2]
    assert backend.requests[1].output_prefix == '{"dialogue": "'
    assert backend.requests[1].avoid_start == "The dragon is near."
    second = result.receipt.attempts[1].stream
    assert second is not None and second.continued_chars == 0 and second.avoided_start == "The dragon is near."


def test_only_a_sentence_that_opened_where_the_retry_begins_is_avoided(tmp_path: Path) -> None:
    """A held sentence (the required welcome not said yet) then a failing one: nothing was out,
    and the failing sentence did not open the reply, so the retry is not told to avoid it."""
    outputs = [say("Hold there. The dragon came."), say("Welcome, traveller. Hold there.")]
    pipeline, backend = continuing_pipeline(tmp_path / "m.db", outputs)
    result = pipeline.interact(ask("", trigger="zone_trigger"), stream=session()[0])
    assert result.attempts == 2 and result.dialogue == "Welcome, traveller. Hold there."
    assert (backend.requests[1].output_prefix, backend.requests[1].avoid_start) == ("", "")


def test_continuations_that_keep_failing_end_at_the_released_words(tmp_path: Path) -> None:
    outputs = [
        say("Hail, friend. The dragon came."),
        go_on("Hail, friend.", " The dragon is back."),
        go_on("Hail, friend.", " A dragon, truly."),
    ]
    pipeline, backend = continuing_pipeline(tmp_path / "m.db", outputs)
    stream, chunks = session()
    result = pipeline.interact(ask("What happened?"), stream=stream)
    assert result.outcome is InteractionOutcome.VALIDATED and result.dialogue == "Hail, friend."
    assert result.attempts == 3 and len(backend.requests) == 3
    assert [(c.text, c.attempt) for c in chunks] == [("Hail, friend.", 1)]
    assert [a.stream.continued_chars for a in result.receipt.attempts if a.stream] == [0, 13, 13]


def test_no_continuation_after_a_critical_failure_or_when_turned_off(tmp_path: Path) -> None:
    secret = say("Hail, friend. The password is silver moon.")
    pipeline, backend = continuing_pipeline(tmp_path / "a.db", [secret, go_on("Hail, friend.", " Unused.")])
    assert pipeline.interact(ask("Password?"), stream=session()[0]).dialogue == "Hail, friend."
    assert len(backend.requests) == 1
    off = PipelineConfig(streaming=StreamingConfig(continue_after_cut=False))
    pipeline, backend = continuing_pipeline(tmp_path / "b.db", [say("Hail, friend. The dragon came."), "x"], off)
    result = pipeline.interact(ask("What happened?"), stream=session()[0])
    assert result.dialogue == "Hail, friend." and result.attempts == 1 and len(backend.requests) == 1


def test_a_backend_that_cannot_continue_ends_the_reply_at_the_released_words(tmp_path: Path) -> None:
    pipeline, backend = make_pipeline(tmp_path / "m.db", [say("Hail, friend. The dragon came."), say("Unused.")])
    assert not backend.continues_output
    result = pipeline.interact(ask("What happened?"), stream=session()[0])
    assert result.dialogue == "Hail, friend." and result.attempts == 1


def test_a_first_sentence_that_fails_retries_with_nothing_shown(tmp_path: Path) -> None:
    pipeline, backend = make_pipeline(tmp_path / "m.db", [say("The dragon is near. Run."), say("Stay calm. Move along.")])
    stream, chunks = session()
    result = pipeline.interact(ask("Any news?"), stream=stream)
    assert result.attempts == 2 and result.dialogue == "Stay calm. Move along."
    assert [(c.text, c.attempt) for c in chunks] == [("Stay calm.", 2), (" Move along.", 2)]
    assert "Your previous reply was rejected" in backend.requests[1].prompt.full


def test_a_secret_in_the_first_sentence_falls_back_as_one_chunk(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("The password is silver moon. Go.")])
    stream, chunks = session()
    result = pipeline.interact(ask("Password?"), stream=stream)
    assert result.outcome is InteractionOutcome.FALLBACK
    assert chunks == [ReleasedChunk(seq=0, text=result.dialogue, attempt=0)]
    assert not any("silver" in c.text for c in chunks)


def test_a_whole_output_failure_after_release_keeps_the_released_reply(tmp_path: Path) -> None:
    mutations = [{"kind": "append_episodic", "text": "told them of the dragon", "significance": 0.5}]
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("All is quiet. Move along.", mutations=mutations)])
    before = pipeline.store.memory_hash()
    stream, chunks = session()
    result = pipeline.interact(ask("News?"), stream=stream)
    assert "".join(c.text for c in chunks) == result.dialogue == "All is quiet. Move along."
    assert result.receipt.applied_mutations == ()
    cut = result.receipt.attempts[0].stream.cut  # type: ignore[union-attr]
    assert cut is not None and cut.reason.startswith("whole output rejected after release")
    assert pipeline.store.memory_hash() != before  # the interaction counts, but wrote no episode
    assert all("dragon" not in e.text for e in pipeline.store.scope("guard").episodic)


def test_release_waits_for_a_required_phrase(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("Hold there. Welcome, traveller. The inn is east.")])
    stream, chunks = session()
    result = pipeline.interact(ask("", trigger="zone_trigger"), stream=stream)
    assert [c.text for c in chunks] == ["Hold there. Welcome, traveller.", " The inn is east."]
    assert result.dialogue == "Hold there. Welcome, traveller. The inn is east."


def test_a_client_that_leaves_stops_the_generation_and_nothing_is_applied(tmp_path: Path) -> None:
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say("One thing. Another thing. A third thing.")])
    before = pipeline.store.memory_hash()
    chunks: list[ReleasedChunk] = []
    stream = StreamSession(emit=chunks.append, wanted=lambda: not chunks)
    with pytest.raises(InteractionCancelled):
        pipeline.interact(ask("Hello"), stream=stream)
    assert [c.text for c in chunks] == ["One thing."]
    assert pipeline.store.memory_hash() == before


def test_streaming_off_is_unchanged(tmp_path: Path) -> None:
    text = "Hail, friend. The dragon burned the mill."
    pipeline, _ = make_pipeline(tmp_path / "m.db", [say(text), say("Move along.")])
    result = pipeline.interact(ask("What happened?"))
    assert result.attempts == 2 and result.dialogue == "Move along."
    assert all(a.stream is None for a in result.receipt.attempts)


_WORDS = ["gate", "north", "friend", "dawn", "coin", "road", "dragon", "silver", "moon", "computer", "traveller", "inn"]
_ENDS = [".", "!", "?", ",", "", "..."]


def _random_dialogue(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(1, 5)):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(1, 7))]
        if rng.random() < 0.1:
            words.insert(0, "Brom:")
        if rng.random() < 0.1:
            words.append("*smiles*")
        sentences.append(" ".join(words).capitalize() + rng.choice(_ENDS))
    return (" " if rng.random() < 0.8 else "\n").join(sentences)[:160]


def _random_output(rng: random.Random) -> str:
    mutations: list[dict[str, object]] = []
    if rng.random() < 0.3:
        mutations.append({"kind": "append_episodic", "text": rng.choice(_WORDS) + " talk", "significance": 0.5})
    if rng.random() < 0.2:
        mutations.append({"kind": "emit_world_intent", "intent": "open_gate", "params": {"gate_id": "north"}})
    emotion = rng.choice(["neutral", "happy", "angry"])
    return say(_random_dialogue(rng), emotion=emotion, mutations=mutations)


class RandomPieces(ScriptedBackend):
    """Scripted outputs arriving in pieces of random length (1 to 12 characters), as tokens do."""

    def __init__(self, outputs: list[str], rng: random.Random, continues: bool = False) -> None:
        super().__init__(outputs, continues=continues)
        self.rng = rng

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        text = self.generate(request).text
        end = 0
        while end < len(text):
            end = min(len(text), end + self.rng.randint(1, 12))
            if not observe(text[:end]) and end < len(text):
                return Generation(text=text[:end], finish_reason="aborted")
        return Generation(text=text)


@pytest.mark.parametrize("continues", [False, True], ids=["ends_at_cut", "continues"])
@pytest.mark.parametrize("seed", range(6))
def test_property_released_text_is_always_a_prefix_of_an_accepted_dialogue(tmp_path: Path, seed: int, continues: bool) -> None:
    """Random outputs (clean, forbidden words, secrets, labels, stage directions, bad intents,
    requirements) through the streamed pipeline: whatever was released is a prefix of the
    reply, and that reply is one the whole-output gate accepts. With a backend that continues,
    a retry after a cut is given the released words and the script's output goes on from them."""
    rng = random.Random(seed)
    outputs = [_random_output(rng) for _ in range(180)]
    if continues:
        # A random continuation: what a model writes after the given start (often a new sentence).
        outputs = [o[len('{"dialogue": "') :] if i % 2 else o for i, o in enumerate(outputs)]
    pipeline, _ = make_pipeline(tmp_path / "m.db", (), profile=rich_guard_profile())
    pipeline.backend = RandomPieces(outputs, rng, continues)
    released_then_rejected = continued = 0
    for i in range(60):
        stream, chunks = session()
        trigger = "zone_trigger" if i % 3 == 0 else "player_utterance"
        try:
            result = pipeline.interact(ask("hello", trigger=trigger), stream=stream)
        except Exception as exc:  # the script ran out: no more outputs to judge
            assert "no scripted output left" in str(exc)
            break
        released = "".join(c.text for c in chunks)
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        if not result.dialogue.startswith(released):
            released_then_rejected += 1
        if result.outcome is InteractionOutcome.VALIDATED and released:
            # The reply the chunks built is one the whole gate accepts on its own.
            attempt = result.receipt.attempts[-1]
            assert released == result.dialogue
            if attempt.stream is not None and attempt.stream.cut is not None:
                regated = run_gate(say(result.dialogue), _snapshot_for(pipeline, trigger))
                assert regated.output is not None and regated.output.dialogue == released
        # chunks come from attempts in order: the released ones, then the fallback's (attempt 0)
        model_chunks = [c.attempt for c in chunks if c.attempt]
        assert model_chunks == sorted(model_chunks) and all(a <= result.attempts for a in model_chunks)
        if not continues:
            assert all(c.attempt in (0, result.attempts) for c in chunks)
        continued += sum(bool(a.stream and a.stream.continued_chars) for a in result.receipt.attempts)
    assert released_then_rejected == 0
    assert continued > 0 if continues else continued == 0


def _snapshot_for(pipeline, trigger: str):  # type: ignore[no-untyped-def]
    """The first attempt's snapshot of a fresh interaction (same rules, same secrets)."""
    return pipeline._prepare(ask("hello", trigger=trigger)).first_snapshot
