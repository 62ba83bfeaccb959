"""Consolidation by the model: what an NPC is about to forget, summarised under the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.summaries import SUMMARY_TAG, TASK, fading


def _notes(*texts: str) -> str:
    return json.dumps({"notes": [{"text": text, "significance": 0.8} for text in texts]})


def _game(tmp_path: Path, outputs: list[str], *, limit: int = 16, filled: int = 15) -> GovernancePipeline:
    store = MemoryStore(tmp_path / "m.sqlite", policy=MemoryPolicy(episodic_limit=limit))
    assert store.load_world(eldmoor_world()).committed
    assert store.register_npc(guard_profile()).committed
    lines = [f"The player asked about the {w} on day {i}." for i, w in enumerate(["road", "rain", "mill", "bread"] * 4)]
    lines[1] = "The player said his sister Kalix hid a compass under the old mill."
    writes = [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT, op=AppendEpisodic(scope="guard", text=t, significance=0.3, at_interaction=i)
        )
        for i, t in enumerate(lines[:filled])
    ]
    assert store.apply(writes).committed
    return GovernancePipeline(store, ScriptedBackend(outputs), recorder=AuditRecorder(store, fingerprint=None))


def _replays_exactly(pipeline: GovernancePipeline) -> None:
    assert pipeline.recorder is not None
    package = pipeline.recorder.export(PackageSelection(), exported_by="test")
    assert [r.exact for r in Replayer(package).run().results] == [True] * len(package.records)


def test_approved_notes_replace_what_was_fading_and_replay(tmp_path: Path) -> None:
    pipeline = _game(tmp_path, [])
    store = pipeline.store
    fading_now = fading(store.scope("guard"), store.policy, store.view("guard").recall)
    assert fading_now
    note = f"I remember this: {fading_now[0].text}"
    pipeline.backend.extend([_notes(note)])  # type: ignore[attr-defined]
    before = [e.text for e in pipeline.store.scope("guard").episodic]
    result = pipeline.consolidate("guard")
    assert result is not None and result.receipt.task_type == TASK and not result.fallback_used
    after = pipeline.store.scope("guard").episodic
    summaries = [e for e in after if SUMMARY_TAG in e.tags]
    assert [e.text for e in summaries] == [note]
    assert len(after) < len(before)  # the fading entries are gone, the summary stands for them
    assert result.audit_record_id is not None
    # What the model was shown: the fading memories, and nothing of the recent ones it keeps.
    request = pipeline.backend.requests[0]  # type: ignore[attr-defined]
    assert request.npc_id == "guard#memory" and "Fading memories:" in request.prompt.full
    _replays_exactly(pipeline)


@pytest.mark.parametrize(
    ("summary", "why"),
    [
        (_notes("The king of Eldmoor is named Bob."), "summary_refused"),  # contradicts a canonical fact
        (_notes("The password is silver moon."), "summary_refused"),  # reveals a secret
        (_notes("I am a Roman soldier and the road is mine."), "summary_refused"),  # says what no memory said
        ("the guard remembers nothing in particular", "summary_unreadable"),  # not the asked JSON
        (_notes(), "summary_empty"),
        # longer than a memory may be (the grammar allowed 240 characters, a memory 200: recording
        # the refusal crashed the consolidation)
        (_notes("The password is silver moon, " + "and the road north is long and wet " * 6), "summary_unreadable"),
    ],
)
def test_a_summary_the_gate_refuses_changes_nothing_and_is_recorded(tmp_path: Path, summary: str, why: str) -> None:
    pipeline = _game(tmp_path, [summary])
    before = pipeline.store.memory_hash()
    result = pipeline.consolidate("guard")
    assert result is not None and result.fallback_used and result.receipt.fallback_reason == why
    assert pipeline.store.memory_hash() == before
    assert result.audit_record_id is not None
    _replays_exactly(pipeline)


def test_nothing_is_summarised_before_memory_nears_its_limit(tmp_path: Path) -> None:
    pipeline = _game(tmp_path, [_notes("Anything.")], filled=8)
    assert pipeline.consolidate("guard") is None
    assert pipeline.backend.requests == []  # type: ignore[attr-defined]


def test_the_sidecar_consolidates_in_idle_time_and_the_npc_goes_on(tmp_path: Path) -> None:
    """Through a real sidecar: once the guard's memory nears its limit, the summary is written
    while nothing else runs, and the guard's next line waits for it, then comes as usual."""
    from waiting import wait_for

    from loreguard.client import Client
    from loreguard.server.bench.soak import _reply
    from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

    store = MemoryStore(tmp_path / "memory.sqlite", policy=MemoryPolicy(episodic_limit=16))
    assert store.load_world(eldmoor_world()).committed
    assert store.register_npc(guard_profile()).committed
    backend = ScriptedBackend(
        {"guard": [_reply(turn, "") for turn in range(40)], "guard#memory": [_notes("The player and the road, day after day.")]}
    )
    sidecar = Sidecar(store, backend, SidecarConfig(port=0))
    sidecar.start()
    try:
        with Client(sidecar.address, timeout_s=30) as client:
            for turn in range(10):  # 15 entries (an exchange a turn, a note every second turn): due at 14
                assert not client.interact("guard", f"How is the road on day {turn}?").fallback_used
            wait_for(lambda: client.stats().counters.get("consolidation.written", 0) == 1, "the summary to be written")
            memory = client.memory("guard").memory
            assert [e.text for e in memory.episodic if SUMMARY_TAG in e.tags] == ["The player and the road, day after day."]
            assert not client.interact("guard", "And today?").fallback_used
    finally:
        sidecar.stop()


@pytest.mark.model
def test_the_real_model_summarises_under_the_gate(tmp_path: Path, llama_backend) -> None:
    """The embedded model writes the summary in the asked form (the grammar holds it to it);
    what it wrote is printed to read, and either stands or was refused with a reason."""
    from model_helpers import Recording

    pipeline = _game(tmp_path, [])
    pipeline.backend = Recording(llama_backend)
    result = pipeline.consolidate("guard")
    assert result is not None and result.audit_record_id is not None
    attempt = result.receipt.attempts[0]
    print(f"summary: {attempt.raw_output}\nwritten: {[m.text for m in result.receipt.applied_mutations]}")
    print(f"refused: {[(r.mutation.text, r.reason) for r in result.receipt.rejected_mutations]}")
    assert attempt.parse_path.value == "strict"
    summaries = [e.text for e in pipeline.store.scope("guard").episodic if SUMMARY_TAG in e.tags]
    assert summaries == [m.text for m in result.receipt.applied_mutations]
    _replays_exactly(pipeline)
