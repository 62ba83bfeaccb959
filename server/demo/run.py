"""`loreguard demo`: register the demo NPCs and run the scripted conversation."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionResult
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.demo.session import TURNS, context_for
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.inference import InferenceBackend, ScriptedBackend


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _row(n: int, result: InteractionResult, latency_ms: float) -> list[str]:
    receipt = result.receipt
    applied = len(receipt.applied_mutations)
    rejected = len(receipt.rejected_mutations)
    return [
        str(n),
        result.npc_id,
        str(result.attempts),
        ",".join(result.failed_gates) or "-",
        "y" if result.fallback_used else "n",
        ",".join(f"{i.type}({','.join(f'{k}={v}' for k, v in sorted(i.params.items()))})" for i in result.intents) or "-",
        f"{applied}/{rejected}",
        f"{latency_ms:.1f}",
    ]


def run_demo(data_dir: Path | None = None, out: TextIO | None = None, backend: InferenceBackend | None = None) -> int:
    """Run the demo conversation; returns a process exit code.

    With no `backend`, the recorded outputs are replayed (deterministic, no model needed).
    """
    out = out or sys.stdout
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(data_dir) if data_dir else Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        store = MemoryStore(directory / "memory.sqlite")
        store.load_world(demo_world())
        names = {}
        for profile in demo_npcs():
            result = store.register_npc(profile)
            if not result.committed:
                print(f"could not register {profile.id}: {result.refusals}", file=sys.stderr)
                return 1
            names[profile.id] = profile.name
        if backend is None:
            scripted = ScriptedBackend({})
            for turn in TURNS:
                scripted.extend(turn.recorded, npc_id=turn.npc_id)
            backend, model = scripted, "scripted (recorded outputs replayed through the full governance pipeline)"
        else:
            fingerprint = backend.fingerprint()
            model = f"{fingerprint.file_name} via {fingerprint.backend} (live; the gate decides what it may say)"
        pipeline = GovernancePipeline(store, backend)
        print(f"Loreguard demo: world 'eldmoor', NPCs {', '.join(sorted(names))}; memory in {directory}", file=out)
        print(f"Model: {model}\n", file=out)
        rows = [["#", "npc", "attempts", "failed gates", "fallback", "intents", "mutations ok/rej", "ms"]]
        for n, turn in enumerate(TURNS, start=1):
            start = time.perf_counter()
            result = pipeline.interact(context_for(turn))
            latency = (time.perf_counter() - start) * 1000
            rows.append(_row(n, result, latency))
            print(f"{n}. [{turn.shows}]", file=out)
            print(f"   Player: {turn.player}", file=out)
            print(f"   {names[turn.npc_id]}: {result.dialogue}  ({result.emotion.value})", file=out)
            for attempt in result.receipt.attempts:
                for failure in attempt.failures:
                    print(f"     attempt {attempt.attempt} rejected by {failure.gate.value}: {failure.reason}", file=out)
            for rejected in result.receipt.rejected_mutations:
                print(f"     mutation rejected: {rejected.reason}", file=out)
            if result.receipt.fallback_reason:
                print(f"     fallback: {result.receipt.fallback_reason}", file=out)
            print(file=out)
        print(_table(rows), file=out)
        counters = ", ".join(f"{k}={v}" for k, v in sorted(pipeline.counters.items()))
        print(f"\ncounters: {counters}", file=out)
        print(f"memory hash: {store.memory_hash()}", file=out)
        store.close()
    return 0
