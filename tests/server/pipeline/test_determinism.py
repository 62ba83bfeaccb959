"""Determinism: the same inputs give the same bytes, whatever the process, hash seed or the
order in which designers and the game listed things."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from factories import rich_guard_profile, rich_world, say
from paths import TESTS
from pipeline_helpers import ask, make_pipeline

from loreguard.memory.hashing import sha256_hex
from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite, NpcProfile, UpsertBelief, WorldDefinition

OUTPUTS = [
    say(
        "Halt. The gate closes at dusk.", mutations=[{"kind": "append_episodic", "text": "A stranger came.", "significance": 0.8}]
    ),
    say("The dragon? Never heard of it."),
    say("Fine weather for it.", mutations=[{"kind": "transform_relationship", "target": "player", "delta": 0.5}]),
]
INPUTS = ["Who goes there?", "Tell me about the dragon", "Lovely rain today"]
#: What the scripted model says after OUTPUTS: new lines, so none repeats an earlier reply.
SPARE = [say("Rain again. Mind the mud by the wall."), say("Off you go, and keep to the road.")]


def _run_scenario(path: Path, profile: NpcProfile | None = None, world: WorldDefinition | None = None) -> list[str]:
    """Prompt bytes of every request, then the final memory hash."""
    pipeline, backend = make_pipeline(path, OUTPUTS + SPARE, profile=profile, world=world)
    for text in INPUTS:
        pipeline.interact(ask(text, tags=["market", "day"]))
    return [r.prompt.full for r in backend.requests] + [pipeline.store.memory_hash()]


def test_same_inputs_same_prompt_bytes_in_one_process(tmp_path: Path) -> None:
    first = _run_scenario(tmp_path / "a.sqlite")
    second = _run_scenario(tmp_path / "b.sqlite")
    assert first == second
    assert len(first) == 5  # 4 requests (one retry) + the memory hash


_SCRIPT = textwrap.dedent(
    """
    import sys, json
    from pathlib import Path
    sys.path[:0] = [{tests!r}, {here!r}]
    from test_determinism import _run_scenario
    print(json.dumps([__import__("hashlib").sha256(x.encode()).hexdigest() for x in _run_scenario(Path(sys.argv[1]))]))
    """
)


@pytest.mark.slow
def test_same_prompt_bytes_across_processes(tmp_path: Path) -> None:
    here = [sha256_hex(x) for x in _run_scenario(tmp_path / "here.sqlite")]
    for i, seed in enumerate(("1", "4242")):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                _SCRIPT.format(tests=str(TESTS), here=str(Path(__file__).parent)),
                str(tmp_path / f"p{i}.sqlite"),
            ],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == here


def _shuffled(data: dict, rng: random.Random) -> dict:
    """The same content with every dict rebuilt in a random key order and set-like lists shuffled."""

    def walk(value: object, key: str = "") -> object:
        if isinstance(value, dict):
            items = list(value.items())
            rng.shuffle(items)
            return {k: walk(v, k) for k, v in items}
        if isinstance(value, list):
            items = [walk(v) for v in value]
            if key in {"canonical_facts", "rules", "allowed_intents", "secrets", "markers", "tags", "enum", "trigger_reasons"}:
                rng.shuffle(items)
            return items
        return value

    return walk(data)  # type: ignore[return-value]


def test_shuffled_insertion_gives_the_same_bytes(tmp_path: Path) -> None:
    profile_data = rich_guard_profile().model_dump(mode="json")
    world_data = rich_world(initial_state={"weather": "rain", "market": True, "toll": 3}).model_dump(mode="json")
    baseline = None
    rng = random.Random(99)
    for trial in range(4):
        profile = NpcProfile.model_validate(_shuffled(profile_data, rng))
        world = WorldDefinition.model_validate(_shuffled(world_data, rng))
        pipeline, backend = make_pipeline(tmp_path / f"s{trial}.sqlite", OUTPUTS[:1], profile=profile, world=world)
        beliefs = [
            ("b_gate", "The gate is sturdy.", 0.9),
            ("b_rain", "Rain is good luck.", 0.5),
            ("b_toll", "Tolls are fair.", 0.7),
        ]
        episodes = [("Saw a fox.", 0.3, 1), ("A cart overturned.", 0.6, 2), ("The captain inspected the gate.", 0.9, 3)]
        rng.shuffle(beliefs)
        rng.shuffle(episodes)
        writes = [
            MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=UpsertBelief(scope="guard", belief_id=b, content=c, confidence=x))
            for b, c, x in beliefs
        ] + [
            MemoryWrite(
                source=Authority.VALIDATED_OUTPUT, op=AppendEpisodic(scope="guard", text=t, significance=s, at_interaction=i)
            )
            for t, s, i in episodes
        ]
        assert pipeline.store.apply(writes).committed
        pipeline.interact(ask("Is the gate sturdy in the rain?", tags=rng.sample(["b", "a", "c"], 3)))
        prompt = backend.requests[0].prompt.full
        assert "b_gate" not in prompt  # ids stay out of prompts; content decides
        if baseline is None:
            baseline = prompt
        assert prompt == baseline


def test_same_output_same_gate_result_and_memory_diff(tmp_path: Path) -> None:
    results = []
    for name in ("x", "y"):
        pipeline, _ = make_pipeline(tmp_path / f"{name}.sqlite", OUTPUTS)
        before = pipeline.store.scope("guard")
        result = pipeline.interact(ask(INPUTS[0]))
        after = pipeline.store.scope("guard")
        diff = {
            "added": sorted(e.model_dump_json() for e in after.episodic if e not in before.episodic),
            "beliefs": sorted(b.model_dump_json() for b in after.beliefs if b not in before.beliefs),
        }
        receipt = result.receipt.model_dump(mode="json", exclude={"timings"})
        results.append(json.dumps({"receipt": receipt, "diff": diff}, sort_keys=True))
    assert results[0] == results[1]


def test_static_prefix_stable_across_50_interactions(tmp_path: Path) -> None:
    outputs = [
        say(f"Line {i}.", mutations=[{"kind": "append_episodic", "text": f"Event {i}.", "significance": (i % 10) / 10}])
        for i in range(50)
    ]
    pipeline, backend = make_pipeline(tmp_path / "m.sqlite", outputs)
    triggers = ["player_utterance", "zone_trigger", "time_trigger", "world_event"]
    for i in range(50):
        pipeline.interact(ask(f"Question number {i} about the king and the river", trigger=triggers[i % 4]))
    prefixes = {r.prompt.static_prefix for r in backend.requests}
    suffixes = {r.prompt.full.removeprefix(r.prompt.static_prefix) for r in backend.requests}
    assert len(backend.requests) >= 50
    assert len(prefixes) == 1
    # Every interaction's suffix is its own (a retry may send its attempt's prompt again: the
    # seed differs, and the batched engine reuses all of it).
    assert len(suffixes) >= 50

    # A profile change changes the prefix; an unchanged re-registration does not.
    pipeline.store.register_npc(rich_guard_profile())
    backend.extend([say("Same as before.")])
    pipeline.interact(ask("again"))
    assert backend.requests[-1].prompt.static_prefix in prefixes
    pipeline.store.register_npc(rich_guard_profile(persona="You are Brom, now a retired guard."))
    backend.extend([say("Different now.")])
    pipeline.interact(ask("again"))
    assert backend.requests[-1].prompt.static_prefix not in prefixes
