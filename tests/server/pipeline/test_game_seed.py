"""A seed per new game (`loreguard.seed`): lines are seeded from it and the NPC's interaction
count, recorded in every receipt; the key is the sidecar's own (no prompt or rule sees it), a save
keeps it, a replay reproduces it; the real model says new lines in a new game, and the same lines
again for the same seed."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import say
from pipeline_helpers import ask, make_pipeline
from sidecar_helpers import running_sidecar
from stores import demo_store

from loreguard.client import Client, Invalid
from loreguard.schemas import Authority, MemoryWrite, SetWorldState
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.memory import GAME_SEED_KEY, WORLD_SCOPE
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.replay import Replayer
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.interaction import seed_for


def _set_seed(pipeline: GovernancePipeline, seed: int) -> None:
    write = MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope=WORLD_SCOPE, key=GAME_SEED_KEY, value=seed))
    assert pipeline.store.apply([write]).committed


def test_seeds_mix_the_game_and_the_count() -> None:
    assert [seed_for(None, i) for i in range(3)] == [0, 1, 2]  # no game seed: as before
    seeds = {seed_for(game, i) for game in (1, 2, 3, 2**32 - 1) for i in range(50)}
    assert len(seeds) == 200 and all(0 <= s < 2**31 for s in seeds)
    assert seed_for(7, 3) == seed_for(7, 3)


def test_the_seed_is_recorded_and_no_prompt_or_rule_sees_the_key(tmp_path: Path) -> None:
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", [say("Move along."), say("Still here.")])
    pipeline.recorder = AuditRecorder(pipeline.store, fingerprint=backend.fingerprint())
    _set_seed(pipeline, 424242)
    first = pipeline.interact(ask("Hello."))
    second = pipeline.interact(ask("Still there?"))
    assert (first.receipt.seed, second.receipt.seed) == (seed_for(424242, 0), seed_for(424242, 1))
    assert [r.seed for r in backend.requests] == [first.receipt.seed, second.receipt.seed]
    assert all("loreguard" not in r.prompt.full and "424242" not in r.prompt.full for r in backend.requests)
    assert not any(key.startswith("world_state:loreguard") for key in first.receipt.context_keys)
    package = pipeline.recorder.export(PackageSelection(), exported_by="test")
    report = Replayer(package).run()
    assert (report.exact_matches, report.drifts) == (2, 0)


def test_set_state_refuses_a_bad_seed_and_other_reserved_keys_changing_nothing(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=60) as client:
        before = sidecar.store.memory_hash()
        for values in (
            {GAME_SEED_KEY: "abc"},
            {GAME_SEED_KEY: -1},
            {GAME_SEED_KEY: True},
            {"loreguard.other": 1, "weather": "sun"},
        ):
            with pytest.raises(Invalid) as caught:
                client.set_state(values)
            assert caught.value.details["errors"][0]["path"].startswith("values.loreguard."), caught.value.details
            assert sidecar.store.memory_hash() == before
        client.new_game(7)
        client.save("slot-a")
        client.new_game()  # a random seed: another game
        client.load("slot-a")  # the save's game again
        seed = next(e.value for e in client.memory("guard").world.world_state if e.key == GAME_SEED_KEY)
        assert seed == 7


@pytest.mark.model
def test_a_new_game_sounds_new_and_the_same_seed_says_the_same(tmp_path: Path, reproducible_backend) -> None:
    lines = ("Good evening. When does the gate close?", "What news from the road?")

    def play(folder: str, seed: int) -> list[str]:
        (tmp_path / folder).mkdir()
        store = demo_store(tmp_path / folder / "memory.sqlite")
        pipeline = GovernancePipeline(store, reproducible_backend)
        _set_seed(pipeline, seed)
        said = [pipeline.interact(ask(line, scene="eldmoor")).dialogue for line in lines]
        store.close()
        return said

    one, other, again = play("a", 11), play("b", 90210), play("c", 11)
    assert one == again, "the same seed (a save replayed) says the same lines"
    assert one != other, f"two new games said the same lines: {one}"
