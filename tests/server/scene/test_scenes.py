"""Scenes over real ZeroMQ with the scripted model: governed lines, presence-scoped memory,
exact replay, the player joining, bad input refused with nothing changed, and a scene's lines
ordered with its NPCs' one-NPC interactions."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from factories import guard_profile, say
from sidecar_helpers import running_sidecar
from waiting import wait_for

from loreguard.client import Client, Invalid, NotFound
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.scene import SceneChunk
from loreguard.server.audit.replay import Replayer
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.pipeline.turn.transcript import SCENE_CUE

SECRET = "silver moon"
SMITH = guard_profile(id="smith", name="Hild", persona="You are Hild, the town smith.", secrets=[], canonical_facts=[])


def _scene_texts(client: Client, npc_id: str) -> list[str]:
    return [e.text for e in client.memory(npc_id).memory.episodic if any(t.startswith("scene:gate@") for t in e.tags)]


def _replay_all(sidecar: object) -> list[bool]:
    package = sidecar.recorder.export(PackageSelection(), exported_by="test")  # type: ignore[attr-defined]
    return [r.exact for r in Replayer(package).run().results]


def test_a_speaker_never_gives_away_its_secret_when_another_npc_asks_for_it(tmp_path: Path) -> None:
    backend = ScriptedBackend(
        [
            say("Brom, what is the gate password? Tell me."),
            say(f"Fine, Mira: the password is {SECRET}."),  # a critical failure: the authored fallback is said
        ]
    )
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        client.scene_start("gate", ["merchant", "guard"], topic="Mira wants the gate password", max_lines=2)
        chunks: list[SceneChunk] = []
        reply = client.scene_next("gate", to_end=True, on_chunk=chunks.append)

        assert [(line.line, line.speaker) for line in reply.lines] == [(1, "merchant"), (2, "guard")]
        assert reply.scene.ended and reply.scene.end_reason == "max_lines"
        guard_line = reply.lines[1].result
        assert guard_line.fallback_used and "reveals secret password" in (guard_line.receipt.fallback_reason or "")
        assert all(SECRET not in line.result.dialogue for line in reply.lines)
        assert all(SECRET not in chunk.text for chunk in chunks)
        assert "".join(c.text for c in chunks if c.line == 2) == guard_line.dialogue
        # what Mira heard and remembers, and every prompt she was given: no password
        assert all(SECRET not in text for text in _scene_texts(client, "merchant"))
        merchant_prompts = [p for r in client.audit_tail(npc_id="merchant").records for p in r.prompts]
        assert merchant_prompts and all(SECRET not in p for p in merchant_prompts)
        assert _replay_all(sidecar) == [True, True]


def test_what_is_said_is_remembered_by_those_present_once_each_and_by_nobody_else(tmp_path: Path) -> None:
    backend = ScriptedBackend([say("The smith is late again."), say("He always is, Brom.")])
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        client.register_npc(SMITH)
        client.register_npc(SMITH.model_copy(update={"id": "baker", "name": "Tam"}))
        absent_before = client.memory("baker").memory
        client.scene_start("gate", ["guard", "merchant"], listeners=["smith"], player_present=True, max_lines=2)
        state = client.scene_say("gate", "Good morning to you all.")
        assert state.player_present and state.lines == 0
        reply = client.scene_next("gate", to_end=True)
        assert [line.result.dialogue for line in reply.lines] == ["The smith is late again.", "He always is, Brom."]

        player = 'Player: "Good morning to you all."'
        assert _scene_texts(client, "smith") == [player, 'Brom: "The smith is late again."', 'Mira: "He always is, Brom."']
        assert _scene_texts(client, "guard") == [player, 'Brom: "The smith is late again."', 'Mira: "He always is, Brom."']
        assert _scene_texts(client, "merchant") == [player, 'Brom: "The smith is late again."', 'Mira: "He always is, Brom."']
        assert _scene_texts(client, "baker") == [] and client.memory("baker").memory == absent_before
        # the speaker's own line is its exchange, the others' are what it heard
        guard_tags = {e.text: e.tags for e in client.memory("guard").memory.episodic}
        assert "exchange" in guard_tags['Brom: "The smith is late again."']
        assert "heard" in guard_tags['Mira: "He always is, Brom."']
        assert _replay_all(sidecar) == [True, True]


def test_the_second_line_continues_the_speakers_own_conversation_and_shows_what_it_heard(tmp_path: Path) -> None:
    lines = ["Mira, seen the smith?", "Not today, Brom.", "Then where is he?", "Ask Hild."]
    with running_sidecar(tmp_path, ScriptedBackend([say(t) for t in lines])) as sidecar, Client(sidecar.address) as client:
        client.scene_start("gate", ["guard", "merchant"], topic="the missing smith", max_lines=4)
        client.scene_next("gate", to_end=True)
        first, second = sorted(client.audit_tail(npc_id="guard").records, key=lambda r: r.seq)
        # the guard's second prompt starts with its whole first prompt's conversation, then its
        # own reply as it wrote it, then what Mira said since
        assert second.prompts[0].startswith(first.prompts[0][: first.prompts[0].rindex("### Now")])
        assert '"dialogue": "Mira, seen the smith?"' in second.prompts[0]
        assert second.prompts[0].endswith(f'Mira: "Not today, Brom."\n{SCENE_CUE}')
        # told who is there and what about in the first line only: the conversation holds it
        assert "Topic: the missing smith" in first.prompts[0][first.prompts[0].rindex("### Now") :]
        assert "Topic:" not in second.prompts[0][second.prompts[0].rindex("### Now") :]
        assert "Hild" not in first.prompts[0]


def test_the_player_joins_and_the_npc_they_name_answers_then_the_rotation_goes_on(tmp_path: Path) -> None:
    backend = ScriptedBackend([say(t) for t in ("Cold morning.", "I have rope for sale.", "Mira sells rope, aye.", "Aye.")])
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address) as client:
        client.scene_start("gate", ["guard", "merchant"], max_lines=4)
        assert client.scene_next("gate").lines[0].speaker == "guard"
        state = client.scene_say("gate", "Brom, do you know a rope seller?")
        assert state.next_speaker == "guard"  # named by the player, though Brom spoke last
        assert client.scene_say("gate", "Or you, Mira?", to="merchant").next_speaker == "merchant"
        reply = client.scene_next("gate", to_end=True)
        assert [line.speaker for line in reply.lines] == ["merchant", "guard", "merchant"]
        heard = reply.lines[0].result.receipt
        assert heard.task_type  # the line answered what the player said
        record = next(r for r in client.audit_tail(npc_id="merchant").records if r.context.scene_turn is not None)
        assert record.context.scene_turn is not None
        assert [line.kind for line in record.context.scene_turn.heard] == ["npc", "player", "player"]
        assert record.context.trigger_reason.value == "player_utterance"


def test_the_same_scene_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    def run(data: Path) -> tuple[list[str], list[str], str, str]:
        data.mkdir()
        backend = ScriptedBackend([say(t) for t in ("Hild is late.", "So it seems.", "Hild! There you are.", "Aye.")])
        with running_sidecar(data, backend) as sidecar, Client(sidecar.address) as client:
            client.register_npc(SMITH)
            client.scene_start("gate", ["guard", "merchant", "smith"], weights={"guard": 2}, max_lines=4)
            client.scene_say("gate", "Morning.", kind="player")
            reply = client.scene_next("gate", to_end=True)
            prompts = [p for r in client.audit_tail(limit=50).records for p in r.prompts]
            return (
                [f"{x.speaker}:{x.result.dialogue}" for x in reply.lines],
                prompts,
                client.memory("smith").memory_hash,
                client.memory("guard").memory_hash,
            )

    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    assert first == second
    # Brom (weight 2) opens; naming Hild hands her the turn each time; between, the rotation
    assert [line.split(":")[0] for line in first[0]] == ["guard", "smith", "guard", "smith"]


@pytest.mark.parametrize(
    ("body", "error", "path"),
    [
        ({"npcs": ["guard", "ghost"]}, NotFound, "npcs.1"),
        ({"npcs": ["guard", "guard"]}, Invalid, "npcs.1"),
        ({"npcs": ["guard"], "listeners": ["guard"]}, Invalid, "listeners.0"),
        ({"npcs": []}, Invalid, "npcs"),
        ({"npcs": ["guard"], "max_lines": 0}, Invalid, "max_lines"),
        ({"npcs": ["guard"], "max_lines": 65}, Invalid, "max_lines"),
        ({"npcs": ["guard"], "weights": {"merchant": 2}}, Invalid, "weights.merchant"),
        ({"npcs": ["guard"], "weights": {"guard": 0}}, Invalid, "weights.guard"),
    ],
)
def test_a_bad_scene_is_refused_naming_the_field_and_nothing_changes(tmp_path: Path, body: dict, error: type, path: str) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address) as client:
        before = (client.memory("guard").memory_hash, client.memory("merchant").memory_hash)
        with pytest.raises(error) as caught:
            client.request("scene.start", {"scene_id": "gate", **body})
        assert path in str(caught.value.details)
        with pytest.raises(NotFound):
            client.scene_get("gate")
        assert (client.memory("guard").memory_hash, client.memory("merchant").memory_hash) == before


def test_lines_and_words_into_an_ended_or_unknown_scene_are_refused_and_change_nothing(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address) as client:
        with pytest.raises(NotFound):
            client.scene_next("nowhere")
        client.scene_start("gate", ["guard", "merchant"], player_may_join=False)
        with pytest.raises(Invalid) as caught:
            client.scene_say("gate", "Hello!")
        assert "kind" in str(caught.value.details)
        with pytest.raises(Invalid) as caught:
            client.scene_say("gate", "A bell rings.", kind="narration", to="smith")
        assert "to" in str(caught.value.details)
        with pytest.raises(Invalid):
            client.scene_start("gate", ["guard"])  # going on
        assert client.scene_end("gate").end_reason == "ended_by_request"
        before = client.memory("guard").memory_hash
        for call in (lambda: client.scene_next("gate"), lambda: client.scene_say("gate", "Wait!", kind="narration")):
            with pytest.raises(Invalid) as caught:
                call()
            assert "scene_id" in str(caught.value.details)
        assert client.memory("guard").memory_hash == before
        with pytest.raises(Invalid) as caught:
            client.request(
                "interact", {"npc_id": "guard", "trigger_reason": "custom", "scene_turn": {"scene_id": "x", "line": 1}}
            )
        assert "scene_turn" in str(caught.value.details)
        assert client.scene_start("gate", ["guard"]).lines == 0  # an ended scene's id may open a new one


class HeldBackend(ScriptedBackend):
    """Holds its first generation until the test opens `gate`."""

    def __init__(self, outputs: list[str]) -> None:
        super().__init__(outputs)
        self.gate = threading.Event()
        self.holding = threading.Event()
        self.calls = 0

    def generate(self, request: GenerationRequest) -> Generation:
        self.calls += 1
        if self.calls == 1:
            self.holding.set()
            assert self.gate.wait(60)
        return super().generate(request)


def test_a_listeners_own_interaction_waits_for_the_scene_line_it_hears(tmp_path: Path) -> None:
    backend = HeldBackend([say("Mira, the gate shuts at dusk."), say("Then I will hurry, traveller.")])
    with running_sidecar(tmp_path, backend, workers=2) as sidecar:
        with Client(sidecar.address) as scene_client, Client(sidecar.address) as player:
            scene_client.scene_start("gate", ["guard"], listeners=["merchant"])
            done: dict[str, object] = {}
            line = threading.Thread(target=lambda: done.update(scene=scene_client.scene_next("gate")))
            line.start()
            assert backend.holding.wait(60)
            talk = threading.Thread(target=lambda: done.update(talk=player.interact("merchant", "Any news?")))
            talk.start()
            wait_for(lambda: sidecar.stats.counters().get("interact.queued", 0) >= 1, "the interact to be queued")
            assert backend.calls == 1  # with a worker free, the merchant's interaction still waits
            backend.gate.set()
            line.join(60)
            talk.join(60)
        records = sorted(sidecar.recorder.tail(limit=10), key=lambda r: r.seq)
        assert [r.npc_id for r in records] == ["guard", "merchant"]
        # the merchant's interaction started from a memory that holds what she heard
        assert 'Brom: "Mira, the gate shuts at dusk."' in records[1].prompts[0]
        assert _replay_all(sidecar) == [True, True]
