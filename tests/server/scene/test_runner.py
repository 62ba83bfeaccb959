"""The scene runner on a real store with the scripted model: a scene is the very one asked for,
a line the speaker did not get to remember comes back to it, a run to the end keeps the lines
spoken when a later one cannot be, and each scene's memories carry their own tag."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import guard_profile, say
from stores import demo_store

from loreguard.schemas.scene import SceneStartRequest
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.scene import SceneBook, SceneProblem, SceneRunner

NAMES = {"guard": "Brom", "merchant": "Mira", "smith": "Hild"}


def _runner(tmp_path: Path, outputs: list[str]) -> tuple[SceneRunner, GovernancePipeline]:
    store = demo_store(tmp_path / "m.sqlite")
    assert store.register_npc(guard_profile(id="smith", name="Hild", secrets=[], canonical_facts=[])).committed
    pipeline = GovernancePipeline(store, ScriptedBackend(outputs))
    return SceneRunner(pipeline, SceneBook()), pipeline


def _start(runner: SceneRunner, npcs: tuple[str, ...], **fields: object) -> None:
    request = SceneStartRequest.model_validate({"scene_id": "gate", "npcs": npcs, **fields})
    runner.book.start(request, NAMES, runner.pipeline.store.next_seq)


def test_a_job_for_a_scene_that_ended_never_speaks_for_a_newer_scene_under_its_id(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, [say("Hild here.")])
    _start(runner, ("guard", "merchant"))
    old = runner.book.get("gate")
    runner.book.end("gate")
    _start(runner, ("smith",))
    with pytest.raises(SceneProblem) as caught:
        runner.next_line(old)
    assert caught.value.code == "invalid" and caught.value.path == "scene_id"
    assert runner.pipeline.store.interactions("smith") == 0
    assert runner.next_line(runner.book.get("gate")).speaker == "smith"


def test_a_line_its_speaker_could_not_remember_comes_back_to_it_with_the_situation(tmp_path: Path) -> None:
    outputs = [
        say("Brom, the password, please."),
        say("Fine: it is silver moon."),  # critical: the authored fallback is said, no exchange is written
        say("Come on, Brom."),
    ]
    runner, _ = _runner(tmp_path, outputs)
    _start(runner, ("merchant", "guard"), topic="the password", max_lines=3)
    scene = runner.book.get("gate")
    lines = runner.run(scene, to_end=True).lines
    assert [line.result.fallback_used for line in lines] == [False, True, False]
    turn = scene.context("guard").scene_turn
    assert turn is not None and not turn.introduced  # told the situation again
    heard = [(line.kind, line.speaker, line.text) for line in turn.heard]
    assert heard == [
        ("npc", "Mira", "Brom, the password, please."),
        ("npc", "Brom", lines[1].result.dialogue),  # what it said instead, which it has no exchange of
        ("npc", "Mira", "Come on, Brom."),
    ]


def test_a_run_to_the_end_keeps_the_lines_spoken_when_a_later_one_runs_out_of_time(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, [say("Cold today."), say("Colder tomorrow.")])
    _start(runner, ("guard", "merchant"), max_lines=4)
    deadlines = iter([None, 0])  # the second line's deadline has passed before it starts
    reply = runner.run(runner.book.get("gate"), to_end=True, deadline_ns=lambda: next(deadlines))
    assert [line.result.dialogue for line in reply.lines] == ["Cold today."]
    assert reply.stopped == "timeout" and reply.scene.lines == 1 and not reply.scene.ended


def test_each_scene_tags_its_memories_with_its_own_run_so_a_later_one_under_the_id_can_recall_them(tmp_path: Path) -> None:
    runner, pipeline = _runner(tmp_path, [say("The smith is late again."), say("Still no smith.")])
    _start(runner, ("guard",), listeners=("merchant",), max_lines=1)
    runner.run(runner.book.get("gate"), to_end=True)
    _start(runner, ("guard",), listeners=("merchant",), max_lines=1)
    second = runner.book.get("gate")
    runner.run(second, to_end=True)
    tags = [t for e in pipeline.store.scope("merchant").episodic for t in e.tags if t.startswith("scene:")]
    assert len(tags) == 2 and tags[0] != tags[1] and tags[1] == f"scene:gate@{second.run}"
