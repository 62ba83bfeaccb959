"""`loreguard bench governance` and `bench audit`: full interactions with the scripted model,
and the same with and without the audit recorder."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.schemas import (
    AppendEpisodic,
    Authority,
    InteractionContext,
    MemoryWrite,
    NpcProfile,
    UpsertBelief,
    WorldDefinition,
)
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.sidecar.stats import percentile


def governance_fixture() -> tuple[NpcProfile, WorldDefinition]:
    """An NPC with 20 canonical facts (half with claims) and 10 rules of mixed severity."""
    facts = [
        {
            "id": f"fact_{i:02d}",
            "text": f"Landmark {i} of Eldmoor stands by the river and was built in year {1000 + i}.",
            "claims": [{"subject": f"landmark {i}", "attribute": "builder", "value": f"Mason{i}"}] if i % 2 else [],
        }
        for i in range(20)
    ]
    rules = [
        {
            "id": f"forbid_{i}",
            "type": "prohibition",
            "severity": "hard",
            "prompt_injection": f"mention forbidden topic {i}",
            "checks": {"forbidden_phrases": [f"taboo{i}"]},
        }
        for i in range(6)
    ] + [
        {"id": "brief", "type": "prohibition", "severity": "soft", "prompt_injection": "ramble", "checks": {"max_length": 240}},
        {"id": "no_modern", "type": "prohibition", "severity": "critical", "checks": {"forbidden_patterns": [r"\binternet\b"]}},
        {
            "id": "greet",
            "type": "requirement",
            "severity": "soft",
            "conditions": {"trigger_reasons": ["zone_trigger"]},
            "checks": {"required_phrases": ["traveller"]},
        },
        {
            "id": "market_day",
            "type": "permission",
            "severity": "soft",
            "conditions": {"tags_any": ["market"]},
            "prompt_injection": "talk about prices",
        },
    ]
    profile = NpcProfile.model_validate(
        {
            "id": "bench_guard",
            "name": "Bench Guard",
            "persona": "You are a guard at the gate of Eldmoor. " * 4,
            "canonical_facts": facts,
            "secrets": [{"id": "pw", "text": "The password is silver moon.", "markers": ["silver moon"]}],
            "allowed_intents": [{"type": "open_gate", "params": {"gate_id": {"type": "string", "enum": ["north", "south"]}}}],
            "rules": rules,
            "fallbacks": {"generic": ["Move along."]},
            "bounds": {"max_episodic": 8, "max_beliefs": 6, "max_exchanges": 4},
        }
    )
    world = WorldDefinition(id="eldmoor", lore="A walled river town.", initial_state={"weather": "rain"})
    return profile, world


def _seed_memory(store: MemoryStore, npc_id: str) -> None:
    writes = [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=AppendEpisodic(
                scope=npc_id,
                text=f"Event {i}: a traveller spoke of landmark {i % 20} and the river.",
                significance=(i % 10) / 10,
                at_interaction=0,
            ),
        )
        for i in range(50)
    ] + [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=UpsertBelief(
                scope=npc_id, belief_id=f"belief_{i}", content=f"Belief {i} about landmark {i}.", confidence=0.3 + i / 20
            ),
        )
        for i in range(10)
    ]
    if not store.apply(writes).committed:
        raise RuntimeError("could not seed benchmark memory")


#: One kind of answer per player line of the bench (`inputs` in `bench_governance`), so that no
#: reply repeats an earlier answer to another question (the gate's `repeats_itself` limit).
_ANSWERS = (
    "Landmark {n} stands by the river, traveller.",
    "Mason{n} built it, long ago.",
    "Rain again, but the market is busy.",
    "Carts came in from the south at dawn.",
)


def _output(i: int, valid: bool) -> str:
    dialogue = _ANSWERS[i % 4].format(n=i % 20) if valid else f"Let me tell you about taboo{i % 6}."
    mutations = [{"kind": "append_episodic", "text": f"Spoke about landmark {i % 20}.", "significance": 0.4}] if valid else []
    return json.dumps({"dialogue": dialogue, "emotion": "neutral", "mutations": mutations})


def _outputs(total: int) -> list[str]:
    """Model outputs for `total` interactions; every fourth needs one retry."""
    outputs = []
    for i in range(total):
        if i % 4 == 3:
            outputs.append(_output(i, valid=False))
        outputs.append(_output(i, valid=True))
    return outputs


def bench_governance(interactions: int = 400, warmup: int = 20) -> dict[str, float]:
    """Full interactions through the governance pipeline with the scripted backend; every
    fourth interaction needs one retry."""
    profile, world = governance_fixture()
    total = warmup + interactions
    outputs = _outputs(total)
    with tempfile.TemporaryDirectory() as tmp:
        # Keep episodic memory near 50 entries, as the scenario asks, by pruning past 60.
        store = MemoryStore(Path(tmp) / "bench.sqlite", policy=MemoryPolicy(episodic_limit=60))
        store.load_world(world)
        store.register_npc(profile)
        _seed_memory(store, profile.id)
        pipeline = GovernancePipeline(store, ScriptedBackend(outputs))
        inputs = ["Tell me about the landmark by the river", "Who built it?", "Nice weather", "Any news?"]
        samples = []
        for i in range(total):
            ctx = InteractionContext(
                npc_id=profile.id, trigger_reason="player_utterance", player_input=inputs[i % 4], tags=("market",)
            )
            start = time.perf_counter_ns()
            result = pipeline.interact(ctx)
            elapsed = time.perf_counter_ns() - start
            if result.fallback_used:
                raise RuntimeError(f"benchmark interaction {i} fell back: {result.receipt.fallback_reason}")
            if i >= warmup:
                samples.append(elapsed / 1000)
        retries = pipeline.counters["retries"]
        store.close()
    samples.sort()
    return {
        "governance_p50_us": round(statistics.median(samples), 1),
        "governance_p99_us": round(percentile(samples, 0.99), 1),
        "interactions": len(samples),
        "retries": retries,
    }


def bench_audit(interactions: int = 300, warmup: int = 20) -> dict[str, float]:
    """What the black box costs: the governance workload above, run on two stores side by
    side (interleaved, so machine noise hits both), one with the audit recorder and one
    without; then the recorded interactions exported and replayed."""
    from loreguard.schemas.audit import PackageSelection
    from loreguard.server.audit import AuditRecorder
    from loreguard.server.audit.package import PackageFormat, encode_package
    from loreguard.server.audit.replay import Replayer

    profile, world = governance_fixture()
    total = warmup + interactions
    outputs = _outputs(total)
    inputs = ["Tell me about the landmark by the river", "Who built it?", "Nice weather", "Any news?"]
    with tempfile.TemporaryDirectory() as tmp:
        pipelines = {}
        for name in ("plain", "recorded"):
            store = MemoryStore(Path(tmp) / f"{name}.sqlite", policy=MemoryPolicy(episodic_limit=60))
            store.load_world(world)
            store.register_npc(profile)
            _seed_memory(store, profile.id)
            recorder = AuditRecorder(store, fingerprint=None) if name == "recorded" else None
            pipelines[name] = GovernancePipeline(store, ScriptedBackend(outputs), recorder=recorder)
        samples: dict[str, list[float]] = {"plain": [], "recorded": []}
        for i in range(total):
            ctx = InteractionContext(
                npc_id=profile.id, trigger_reason="player_utterance", player_input=inputs[i % 4], tags=("market",)
            )
            for name in ("plain", "recorded") if i % 2 else ("recorded", "plain"):
                start = time.perf_counter_ns()
                pipelines[name].interact(ctx)
                if i >= warmup:
                    samples[name].append((time.perf_counter_ns() - start) / 1000)
        recorded = pipelines["recorded"]
        assert isinstance(recorded.recorder, AuditRecorder)
        log_bytes = sum(
            len(r) for (r,) in recorded.store.db.execute("SELECT record FROM audit UNION ALL SELECT data FROM audit_blobs")
        )
        package = recorded.recorder.export(PackageSelection(last=50), exported_by="bench")
        json_size = len(encode_package(package, PackageFormat.JSON))
        compressed_size = len(encode_package(package, PackageFormat.COMPRESSED))
        replayer = Replayer(package)
        replay_us = []
        for record in package.records:
            start = time.perf_counter_ns()
            if not replayer.replay_record(record).exact:
                raise RuntimeError(f"benchmark record {record.record_id} drifted on replay")
            replay_us.append((time.perf_counter_ns() - start) / 1000)
        for pipeline in pipelines.values():
            pipeline.store.close()
    plain, with_audit = statistics.median(samples["plain"]), statistics.median(samples["recorded"])
    return {
        "interactions": interactions,
        "governance_p50_us": round(plain, 1),
        "governance_recorded_p50_us": round(with_audit, 1),
        "audit_overhead_p50_us": round(with_audit - plain, 1),
        "audit_overhead_ratio": round(with_audit / plain, 3),
        "audit_log_bytes_per_interaction": round(log_bytes / total),
        "package_records": len(package.records),
        "package_json_bytes": json_size,
        "package_compressed_bytes": compressed_size,
        "package_compression_ratio": round(json_size / compressed_size, 1),
        "replay_p50_us_per_record": round(statistics.median(replay_us), 1),
    }
