"""The sidecar over real ZeroMQ sockets on loopback: every message, typed errors, concurrency."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import msgpack
import pytest
import zmq
from factories import say
from sidecar_helpers import GREETINGS, running_sidecar
from waiting import counter, wait_for

from loreguard.client import AsyncClient, Client, Forbidden, Invalid, NoReply, NotFound, Overloaded, UnknownType
from loreguard.schemas import InteractionResult
from loreguard.schemas.prompt import Prompt
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest, WarmResult


class GatedBackend(ScriptedBackend):
    """Scripted outputs, but each generation waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__([say("Aye.")], cycle=True)
        self.gate = threading.Event()
        self.started = threading.Event()

    def generate(self, request: GenerationRequest) -> Generation:
        self.started.set()
        assert self.gate.wait(30)
        return super().generate(request)


def test_every_message_type_round_trips(tmp_path: Path) -> None:
    with running_sidecar(tmp_path, register=False) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        hello = client.hello()
        assert hello.protocol_versions == (1,) and "interact" in hello.capabilities
        assert hello.limits.max_message_bytes == 1 << 20
        assert client.load_world(demo_world()).world_id == "eldmoor"
        for profile in demo_npcs():
            assert client.register_npc(profile).npc_id == profile.id
        state = client.set_state({"alarm": False, "weather": "fog"})
        assert state.applied == 2
        result = client.interact("guard", "Good evening.")
        assert isinstance(result, InteractionResult) and result.dialogue == "Well met, traveller."
        memory = client.memory("guard")
        assert memory.interactions == 1 and memory.memory_hash == result.receipt.memory_hash_after
        assert client.save("slot1").memory_hash == sidecar.store.memory_hash()
        client.interact("guard", "Again.")
        assert client.load("slot1").memory_hash == client.save("slot1").memory_hash
        assert client.memory("guard").interactions == 1
        tail = client.audit_tail(npc_id="guard")
        assert [r.receipt.interaction_index for r in tail.records] == [0, 1]
        assert [r.record_id for r in tail.records] == [result.audit_record_id, "r2"] and tail.last_seq == 2
        assert client.audit_tail(after=1).records[0].seq == 2
        exported = client.audit_export(npc_id="guard")
        assert exported.records == 2 and exported.package["package"]["format_version"] == 1
        stats = client.stats()
        assert stats.counters["interact.validated"] == 2 and stats.latency_us["interact_count"] == 2


def test_typed_errors_change_nothing(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before = sidecar.store.memory_hash()
        with pytest.raises(NotFound):
            client.interact("nobody", "hello")
        with pytest.raises(NotFound):
            client.memory("nobody")
        with pytest.raises(NotFound):
            client.load("no_such_slot")
        client.save("damaged")
        sidecar.store.db.execute("UPDATE slots SET image = ? WHERE name = 'damaged'", (b"\x78\x9c cut short",))
        with pytest.raises(Invalid) as damaged:
            client.load("damaged")
        assert damaged.value.details == {"slot": "damaged", "cause": "corrupt"}
        assert sidecar.store.memory_hash() == before
        with pytest.raises(NotFound):
            client.set_state({"alarm": True}, npc_id="nobody")
        with pytest.raises(Invalid) as invalid:
            client.request("interact", {"npc_id": "guard", "trigger_reason": "sneeze"})
        assert invalid.value.details["errors"][0]["path"] == "trigger_reason"
        with pytest.raises(UnknownType):
            client.request("npc.delete", {})
        guard = demo_npcs()[0].model_dump(mode="json")
        guard["canonical_facts"][0]["text"] = "The north gate never closes."
        with pytest.raises(Forbidden) as forbidden:
            client.register_npc(guard)
        assert forbidden.value.details["refusals"][0]["code"] in {"duplicate_id", "canonical_immutable"}
        assert sidecar.store.memory_hash() == before


def test_npc_warm_is_answered_at_once_and_changes_no_memory(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before = sidecar.store.memory_hash()
        assert client.warm("guard").npc_id == "guard"
        # The scripted model keeps no cache: the warm-up runs (the prompt is built) and says so.
        wait_for(lambda: counter(client, "warm.unsupported") == 1, "the warm-up to run")
        assert counter(client, "warm.pending") == 0 and counter(client, "warm.requested") == 1
        assert sidecar.store.memory_hash() == before and client.memory("guard").interactions == 0
        assert client.audit_tail().records == ()


class _SlowWarmBackend(ScriptedBackend):
    """A model whose warm-up runs until the test lets it finish."""

    def __init__(self) -> None:
        super().__init__([say(line) for line in GREETINGS], cycle=True)
        self.finish = threading.Event()

    def warm(self, npc_id: str, prompt: Prompt, *, alongside: bool = False) -> WarmResult:
        assert self.finish.wait(60), "the test never let the warm-up finish"
        return WarmResult(outcome="warmed", tokens=10, tokens_evaluated=10)


def test_npc_warm_with_wait_s_returns_once_no_warm_up_is_pending(tmp_path: Path) -> None:
    backend = _SlowWarmBackend()
    with running_sidecar(tmp_path, backend) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        with pytest.raises(NoReply, match="warm-ups still pending"):
            client.warm("guard", wait_s=0.2)  # the warm-up is still running: the wait says so
        backend.finish.set()
        assert client.warm("merchant", wait_s=30).npc_id == "merchant"
        # both done when it returns: no waiting here
        assert counter(client, "warm.pending") == 0 and counter(client, "warm.warmed") == 2


def test_npc_warm_refuses_bad_input_with_typed_errors(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before = sidecar.store.memory_hash()
        with pytest.raises(NotFound) as missing:
            client.warm("nobody")
        assert missing.value.details == {"npc_id": "nobody"}
        for body in ({"npc_id": 7}, {}, {"npc_id": "guard", "extra": True}, {"npc_id": "no spaces allowed"}):
            with pytest.raises(Invalid):
                client.request("npc.warm", body)
        assert counter(client, "warm.requested") == 0 and counter(client, "warm.pending") == 0
        assert sidecar.store.memory_hash() == before


def _raw(address: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    return sock


def _reply(sock: zmq.Socket) -> dict:
    assert sock.poll(10_000), "no reply"
    return msgpack.unpackb(sock.recv(), raw=False)


def test_envelope_errors_carry_the_id_when_there_is_one(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar:
        sock = _raw(sidecar.address)
        sock.send(b"\xc1 not msgpack")
        assert _reply(sock)["body"]["code"] == "bad_request"
        sock.send(msgpack.packb({"v": 2, "id": "x1", "type": "hello", "body": {}}))
        error = _reply(sock)
        assert (error["id"], error["body"]["code"], error["body"]["details"]) == ("x1", "unsupported_version", {"supported": [1]})
        sock.send(msgpack.packb({"v": 1, "id": 7, "type": "hello"}))
        error = _reply(sock)
        assert (error["id"], error["body"]["code"]) == (7, "bad_request")
        sock.send_multipart([b"two", b"frames"])
        error = _reply(sock)
        assert error["id"] is None and error["body"]["code"] == "bad_request"
        sock.close()


def test_an_oversized_message_is_dropped_without_harming_others(tmp_path: Path) -> None:
    with running_sidecar(tmp_path, max_message_bytes=4096) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        big = _raw(sidecar.address)
        big.send(msgpack.packb({"v": 1, "id": 1, "type": "hello", "body": {"client": "x" * 10_000}}))
        wait_for(lambda: counter(client, "clients.disconnected") == 1, "the oversized peer to be disconnected")
        assert not big.poll(0)  # and it got no reply
        big.close()
        assert client.interact("guard", "Still there?").dialogue


def test_a_full_queue_answers_overloaded(tmp_path: Path) -> None:
    backend = GatedBackend()
    with running_sidecar(tmp_path, backend, queue_size=1) as sidecar:

        async def scenario() -> list[object]:
            async with AsyncClient(sidecar.address, timeout_s=30) as client:
                first = asyncio.create_task(client.interact("guard", "one"))
                await asyncio.get_running_loop().run_in_executor(None, backend.started.wait, 10)
                second = asyncio.create_task(client.interact("guard", "two"))  # queued
                while (await client.stats()).counters.get("interact.queued", 0) < 2:
                    await asyncio.sleep(0.01)  # the queue holds "two" once the sidecar counted it
                with pytest.raises(Overloaded):
                    await client.interact("guard", "three")  # no room
                backend.gate.set()
                return [await first, await second]

        first, second = asyncio.run(scenario())
        assert [first.receipt.interaction_index, second.receipt.interaction_index] == [0, 1]


def test_interactions_for_one_npc_apply_in_arrival_order(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar:

        async def scenario() -> list[InteractionResult]:
            async with AsyncClient(sidecar.address, timeout_s=30) as client:
                return await asyncio.gather(*(client.interact("merchant", f"line {i}") for i in range(20)))

        results = asyncio.run(scenario())
        assert [r.receipt.interaction_index for r in results] == list(range(20))
        episodic = sidecar.store.scope("merchant").episodic
        lines = [e.text.split('"')[1] for e in sorted(episodic, key=lambda e: e.at_interaction) if e.text.startswith("Player:")]
        assert lines == [f"line {i}" for i in range(20)]


def test_work_of_a_disconnected_client_is_dropped_before_inference(tmp_path: Path) -> None:
    backend = GatedBackend()
    with (
        running_sidecar(tmp_path, backend) as sidecar,
        Client(sidecar.address, timeout_s=30) as staying,
        Client(sidecar.address, timeout_s=30) as watcher,  # a sync Client serves one thread
    ):
        leaving = _raw(sidecar.address)
        blocker = threading.Thread(target=lambda: staying.interact("guard", "first"))
        blocker.start()
        assert backend.started.wait(10)
        for i in range(3):
            leaving.send(msgpack.packb({"v": 1, "id": i, "type": "interact",
                                        "body": {"npc_id": "merchant", "trigger_reason": "player_utterance", "player_input": "hi"}}))  # fmt: skip
        wait_for(lambda: counter(watcher, "interact.queued") == 4, "the leaving client's 3 interactions to be queued")
        leaving.close()
        wait_for(lambda: counter(watcher, "clients.disconnected") == 1, "the sidecar to see the client leave")
        backend.gate.set()
        blocker.join(60)
        assert not blocker.is_alive()
        # The worker reaches the three queued jobs after it answered "first": wait for it.
        wait_for(lambda: counter(watcher, "interact.dropped_disconnected") == 3, "the three jobs to be dropped")
        assert watcher.memory("merchant").interactions == 0


def test_a_client_on_a_departed_clients_descriptor_is_answered(tmp_path: Path) -> None:
    """The OS gives a new connection the descriptor a closed one had; whatever order the monitor's
    events and the frames are read in, the newcomer is never taken for the client that left."""
    with running_sidecar(tmp_path) as sidecar:
        for round_ in range(40):
            with Client(sidecar.address, timeout_s=30) as leaving:
                leaving.hello()
            with Client(sidecar.address, timeout_s=30) as arriving:
                assert arriving.interact("guard", f"Round {round_}.").dialogue


def test_registration_and_state_refuse_rules_that_could_never_hold_as_meant(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        guard = demo_npcs()[0].model_dump(mode="json")
        before = sidecar.store.memory_hash()

        style = {"id": "gruff", "type": "requirement", "severity": "critical", "behavioural": True}
        with pytest.raises(Invalid, match="npc.register") as behavioural:
            client.register_npc({**guard, "rules": [*guard["rules"], style]})
        assert "must be soft" in behavioural.value.details["errors"][0]["reason"]
        with pytest.raises(Invalid) as task:
            client.register_npc(
                {**guard, "rules": [{"id": "t", "type": "prohibition", "conditions": {"task_types": ["haggling"]}}]}
            )
        assert task.value.details["errors"][0]["path"].endswith("conditions.task_types.0")
        assert sidecar.store.memory_hash() == before

        curfew = {
            "id": "curfew",
            "type": "prohibition",
            "prompt_injection": "No visitors.",
            "conditions": {"world_state": {"curfew": True}},
        }
        client.register_npc({**guard, "rules": [*guard["rules"], curfew]})
        registered = sidecar.store.memory_hash()
        with pytest.raises(Invalid) as mistyped:
            client.set_state({"curfew": "yes", "weather": "rain"})
        (error,) = mistyped.value.details["errors"]
        assert error["path"] == "values.curfew" and "'curfew'" in error["reason"]
        assert sidecar.store.memory_hash() == registered  # not even the well-typed key was written
        client.set_state({"curfew": True})
        assert sidecar.store.memory_hash() != registered


def test_npc_register_refuses_a_rule_id_the_loaded_world_already_has(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before = sidecar.store.memory_hash()
        merchant = demo_npcs()[1].model_dump(mode="json")
        lax = {"id": "no_modern", "type": "prohibition", "severity": "soft", "checks": {"forbidden_phrases": ["gun"]}}
        changed = {**merchant, "persona": merchant["persona"] + " Changed.", "rules": [*merchant["rules"], lax]}
        with pytest.raises(Invalid, match="npc.register") as refused:
            client.register_npc(changed)
        (error,) = refused.value.details["errors"]
        assert error["path"] == f"rules.{len(merchant['rules'])}.id" and error["kind"] == "rule_id_collision"
        assert (error["npc_rule"], error["world_rule"]) == ("merchant:no_modern", "eldmoor:no_modern")
        assert "NPC 'merchant'" in error["reason"] and "world 'eldmoor' (rules.0)" in error["reason"]
        assert sidecar.store.memory_hash() == before
        assert sidecar.store.profile("merchant") == demo_npcs()[1]  # nothing registered


def test_world_load_refuses_a_rule_id_a_registered_npc_already_has(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before, world = sidecar.store.memory_hash(), sidecar.store.world()
        stricter = {"id": "brief", "type": "prohibition", "severity": "critical", "checks": {"max_length": 100}}
        changed = {**demo_world().model_dump(mode="json"), "lore": "Changed.", "rules": [stricter]}
        with pytest.raises(Invalid, match="world.load") as refused:
            client.load_world(changed)
        (error,) = refused.value.details["errors"]
        assert error["path"] == "rules.0.id" and error["kind"] == "rule_id_collision"
        assert (error["world_rule"], error["npc_rule"]) == ("eldmoor:brief", "guard:brief")
        assert "NPC 'guard' (rules.2)" in error["reason"]
        assert sidecar.store.memory_hash() == before and sidecar.store.world() == world  # nothing loaded
        client.load_world({**changed, "rules": [{**stricter, "id": "world_brief"}]})  # a new id is fine


def test_registration_refuses_checks_that_could_never_fire_as_meant(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before = sidecar.store.memory_hash()
        merchant = demo_npcs()[1].model_dump(mode="json")
        n = len(merchant["rules"])
        emoji = {"id": "no_dragon_emoji", "type": "prohibition", "checks": {"forbidden_phrases": ["🐉"]}}
        with pytest.raises(Invalid, match="npc.register") as phrase:
            client.register_npc({**merchant, "rules": [*merchant["rules"], emoji]})
        (error,) = phrase.value.details["errors"]
        assert error["path"] == f"rules.{n}.checks.forbidden_phrases.0" and "no letter or digit" in error["reason"]
        with pytest.raises(Invalid) as marker:
            client.register_npc({**merchant, "secrets": [{"id": "stash", "text": "Under the floor.", "markers": ["***"]}]})
        assert marker.value.details["errors"][0]["path"] == "secrets.0.markers.0"
        permission = {"id": "haggle", "type": "permission", "checks": {"forbidden_phrases": ["free"]}}
        with pytest.raises(Invalid) as granted:
            client.register_npc({**merchant, "rules": [*merchant["rules"], permission]})
        (error,) = granted.value.details["errors"]
        assert error["path"] == f"rules.{n}" and "checks.forbidden_phrases" in error["reason"]
        with pytest.raises(Invalid) as world:
            client.load_world({**demo_world().model_dump(mode="json"), "rules": [{**emoji, "id": "w"}]})
        assert world.value.details["errors"][0]["path"] == "rules.0.checks.forbidden_phrases.0"
        assert sidecar.store.memory_hash() == before and sidecar.store.profile("merchant") == demo_npcs()[1]


def test_registration_refuses_a_claim_phrase_with_no_word_or_a_repetition_threshold_outside_0_1(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before = sidecar.store.memory_hash()
        merchant = demo_npcs()[1].model_dump(mode="json")
        fact = demo_npcs()[0].model_dump(mode="json")["canonical_facts"][0]  # the guard's: Mira's prices are wares
        for value, where in (("", "value"), ("\u200b...", "value")):
            broken = {**fact, "claims": [{**fact["claims"][0], where: value}]}
            with pytest.raises(Invalid, match="npc.register") as refused:
                client.register_npc({**merchant, "canonical_facts": [broken]})
            (error,) = refused.value.details["errors"]
            assert error["path"] == "canonical_facts.0.claims.0.value", error
        spaced = {**fact, "claims": [{**fact["claims"][0], "other_values": ["🐉"]}]}
        with pytest.raises(Invalid) as other:
            client.register_npc({**merchant, "canonical_facts": [spaced]})
        assert other.value.details["errors"][0]["path"] == "canonical_facts.0.claims.0.other_values.0"
        for field in ("value_aliases", "role_cues"):
            empty = {**fact, "claims": [{**fact["claims"][0], field: ["\u200b!"]}]}
            with pytest.raises(Invalid) as alias:
                client.register_npc({**merchant, "canonical_facts": [empty]})
            assert alias.value.details["errors"][0]["path"] == f"canonical_facts.0.claims.0.{field}.0"
        for threshold in (0, 1.5):
            limits = {**merchant.get("output_limits", {}), "max_self_similarity": threshold}
            with pytest.raises(Invalid) as repeat:
                client.register_npc({**merchant, "output_limits": limits})
            assert repeat.value.details["errors"][0]["path"] == "output_limits.max_self_similarity"
        assert sidecar.store.memory_hash() == before and sidecar.store.profile("merchant") == demo_npcs()[1]


def test_npc_register_refuses_a_fallback_line_that_breaks_a_standing_rule_or_reveals_a_secret(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before, guard = sidecar.store.memory_hash(), demo_npcs()[0].model_dump(mode="json")
        beware = {**guard, "persona": "Changed.", "fallbacks": {"generic": ["Hmph.", "Beware the dragon."]}}
        with pytest.raises(Invalid, match="npc.register") as refused:
            client.register_npc(beware)
        (error,) = refused.value.details["errors"]
        assert (error["path"], error["kind"]) == ("fallbacks.generic.1", "fallback_breaks_rule")
        assert (error["line"], error["rule"]) == ("guard:fallbacks.generic.1", "guard:no_dragon")
        assert "rules.0" in error["reason"] and 'forbidden phrase "dragon"' in error["reason"]
        telling = {**guard, "fallbacks": {"by_trigger": {"player_utterance": ["It's silver moon, go on."]}}}
        with pytest.raises(Invalid) as leak:
            client.register_npc(telling)
        (error,) = leak.value.details["errors"]
        assert (error["path"], error["rule"]) == ("fallbacks.by_trigger.player_utterance.0", "guard:password")
        assert "silver" not in error["reason"]  # the secret's id, never its text
        assert sidecar.store.memory_hash() == before and sidecar.store.profile("guard") == demo_npcs()[0]


def test_world_load_refuses_fallback_lines_that_break_a_registered_npcs_rule(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        before, world = sidecar.store.memory_hash(), sidecar.store.world()
        changed = {
            **demo_world().model_dump(mode="json"),
            "fallbacks": {"generic": ["A dragon, I tell you!"]},
            "emergency_fallback": "Where is my phone?",
        }
        with pytest.raises(Invalid, match="world.load") as refused:
            client.load_world(changed)
        errors = [(e["path"], e["line"], e["rule"]) for e in refused.value.details["errors"]]
        assert errors == [
            ("fallbacks.generic.0", "eldmoor:fallbacks.generic.0", "guard:no_dragon"),
            ("emergency_fallback", "eldmoor:emergency_fallback", "eldmoor:no_modern"),
        ]  # the emergency line against the world's rule: once, although both NPCs are checked
        assert sidecar.store.memory_hash() == before and sidecar.store.world() == world  # nothing loaded


def test_a_slot_that_conflicts_with_newer_designer_data_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    from loreguard.schemas import Authority, MemoryWrite, RemoveEntry, UpsertBelief

    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        belief = UpsertBelief(scope="guard", belief_id="moon", content="Two moons.", confidence=0.5)
        assert sidecar.store.apply([MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=belief)]).committed
        client.save("chapter1")
        remove = RemoveEntry(scope="guard", kind="belief", entry_id="moon")
        assert sidecar.store.apply([MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=remove)]).committed
        guard = demo_npcs()[0].model_dump(mode="json")
        guard["canonical_facts"].append({"id": "moon", "text": "Eldmoor has one moon."})
        client.register_npc(guard)
        before = sidecar.store.memory_hash()
        with pytest.raises(Forbidden) as refused:
            client.load("chapter1")
        assert refused.value.details == {"slot": "chapter1", "cause": "slot_conflict"}
        assert sidecar.store.memory_hash() == before
