"""`loreguard demo`: a sidecar, the demo NPCs registered over ZeroMQ, and the conversation."""

from __future__ import annotations

import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from loreguard.client import Client, LoreguardError, NoReply
from loreguard.memory import DataFolderLock, MemoryStore
from loreguard.schemas import InteractionResult
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.demo.happened import what_happened
from loreguard.server.demo.session import TURNS, context_for
from loreguard.server.inference import InferenceBackend, ScriptedBackend
from loreguard.server.sidecar.serve import EXIT_FOLDER_IN_USE, take_data_folder
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


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


def _report(player: str, name: str, result: InteractionResult, out: TextIO, settled: list[str]) -> None:
    print(f"   Player: {player}", file=out)
    print(f"   {name}: {result.dialogue}  ({result.emotion.value})", file=out)
    for attempt in result.receipt.attempts:
        for failure in attempt.failures:
            print(f"     attempt {attempt.attempt} rejected by {failure.gate.value}: {failure.reason}", file=out)
    for rejected in result.receipt.rejected_mutations:
        print(f"     mutation rejected: {rejected.reason}", file=out)
    if result.receipt.fallback_reason:
        print(f"     fallback: {result.receipt.fallback_reason}", file=out)
    for deal in result.receipt.deals:
        print(f"     decided by the rules: {'granted' if deal.granted else 'declined'}, {deal.reason}", file=out)
    for line in settled:
        print(line, file=out)
    print(file=out)


def _chat(client: Client, names: dict[str, str], npc_id: str, out: TextIO, read: Callable[[str], str]) -> None:
    print(f"Talking to {names[npc_id]} ({npc_id}). Empty line or Ctrl-D to stop.", file=out)
    while True:
        try:
            line = read("You: ").strip()
        except EOFError:
            break
        if not line:
            break
        # Streamed, as a game shows it: each sentence appears once the gate has passed it.
        print(f"{names[npc_id]}: ", end="", file=out, flush=True)
        result = None
        for item in client.interact_stream(npc_id, line, scene="eldmoor"):
            if isinstance(item, InteractionResult):
                result = item
            else:
                print(item.text, end="", file=out, flush=True)
        assert result is not None  # a stream always ends with its result
        gates = ",".join(result.failed_gates) or "-"
        print(f"  [attempts {result.attempts}, failed {gates}, "
              f"fallback {'y' if result.fallback_used else 'n'}]", file=out)  # fmt: skip
        for settled in _settle(client, result):
            print(settled, file=out)


def _settle(client: Client, result: InteractionResult) -> list[str]:
    """As a game does with a sale the rules made: take its price from the player's purse and the
    wares from their stock, and tell the sidecar (`set_state`), which decides the next request
    on them. The demo's world keeps both in its world scope."""
    purse_key, settled = demo_world().economy.purse, []
    specs = {spec.type: spec for p in demo_npcs() if p.id == result.npc_id for spec in p.allowed_intents}
    for intent in result.intents:
        spec = specs.get(intent.type)
        if intent.payment is None or spec is None:
            continue
        world = client.memory(result.npc_id).world
        values: dict[str, object] = {}
        purse = world.state_value(purse_key)
        if isinstance(purse, int):
            values[purse_key] = purse - intent.payment.value
        ware = spec.wares.get(str(intent.params.get(spec.ware_param or "")))
        left = world.state_value(ware.stock) if ware is not None and ware.stock else None
        if ware is not None and ware.stock and isinstance(left, int):
            values[ware.stock] = left - int(intent.params.get(spec.count_param or "", 1))
        client.set_state(values)
        shown = ", ".join(f"{key} {value}" for key, value in sorted(values.items()))
        settled.append(f"   (the game settles the sale: {intent.payment.amount} {intent.payment.currency} paid; {shown})")
    return settled


#: The longest the demo waits for its NPCs' warm-ups before it goes on without them.
WARM_WAIT_S = 300.0


def _warm(client: Client, npc_ids: list[str], out: TextIO) -> None:
    """As a game does when the scene loads: the NPCs' prompts into the model's cache, so each
    first line evaluates only the player's message. A warm-up that fails or runs past
    `WARM_WAIT_S` is said in one line, and the demo goes on (its lines are only slower)."""
    print("Warming the NPCs' prompts, as a game does when a scene loads...", file=out, flush=True)
    started = time.perf_counter()
    try:
        for n, npc_id in enumerate(npc_ids, start=1):
            client.warm(npc_id, wait_s=WARM_WAIT_S if n == len(npc_ids) else None)
    except (LoreguardError, NoReply) as exc:
        print(f"  not warmed ({exc}); the first lines evaluate their whole prompt", file=out)
        return
    counters = client.stats().counters
    done = {k.removeprefix("warm."): v for k, v in sorted(counters.items()) if k.startswith("warm.") and k != "warm.pending"}
    print(f"  done in {time.perf_counter() - started:.1f} s ({', '.join(f'{k} {v}' for k, v in done.items())})", file=out)


def _new_game(client: Client, seed: int | None, out: TextIO) -> None:
    """A new game sounds new (a random seed); `--seed` plays one again, line for line."""
    game_seed = secrets.randbelow(2**32) if seed is None else seed
    client.new_game(game_seed)
    print(f"New game, seed {game_seed} (`loreguard demo --seed {game_seed}` plays it again)", file=out)


def run_demo(
    data_dir: Path | None = None,
    out: TextIO | None = None,
    backend: InferenceBackend | None = None,
    *,
    interactive: str | None = None,
    read: Callable[[str], str] = input,
    seed: int | None = None,
) -> int:
    """Start a sidecar, register the demo NPCs through it and run the conversation over ZeroMQ.

    With no `backend`, the recorded outputs are replayed (deterministic, no model needed); a
    live model plays a new game unless `seed` names one. `interactive`: an NPC to chat with."""
    out = out or sys.stdout
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(data_dir) if data_dir else Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        live = backend is not None
        if backend is None:
            scripted = ScriptedBackend({})
            for turn in TURNS:
                scripted.extend(turn.recorded, npc_id=turn.npc_id)
            backend, model = scripted, "scripted (recorded outputs replayed through the full governance pipeline)"
        else:
            fingerprint = backend.fingerprint()
            model = f"{fingerprint.file_name} via {fingerprint.backend} (live; the gate decides what it may say)"
        owner = DataFolderLock(directory)
        if not take_data_folder(owner):  # one sidecar per data folder, the demo's too
            return EXIT_FOLDER_IN_USE
        sidecar = Sidecar(MemoryStore(directory / "memory.sqlite"), backend, SidecarConfig(port=0))
        sidecar.start()
        try:
            with Client(sidecar.address) as client:
                client.load_world(demo_world())
                names = {}
                for profile in demo_npcs():
                    client.register_npc(profile)
                    names[profile.id] = profile.name
                print(f"Loreguard demo: world 'eldmoor', NPCs {', '.join(sorted(names))}; memory in {directory}", file=out)
                print(f"Sidecar: {sidecar.address}; model: {model}", file=out)
                if live:
                    _warm(client, sorted(names), out)
                    _new_game(client, seed, out)
                print(file=out)
                rows = [["#", "npc", "attempts", "failed gates", "fallback", "intents", "mutations ok/rej", "ms"]]
                for n, turn in enumerate(TURNS, start=1):
                    start = time.perf_counter()
                    try:
                        result = client.interact(context_for(turn))
                    except (LoreguardError, NoReply) as exc:  # one line, and the demo goes on
                        print(f"{n}. [no answer: {exc}]\n   (written to show: {turn.shows})\n", file=out)
                        continue
                    rows.append(_row(n, result, (time.perf_counter() - start) * 1000))
                    # The heading says what happened on this run; a live model answers as it answers.
                    print(f"{n}. [{what_happened(result)}]\n   (written to show: {turn.shows})", file=out)
                    _report(turn.player, names[turn.npc_id], result, out, settled=_settle(client, result))
                print(_table(rows), file=out)
                stats = client.stats()
                counters = ", ".join(f"{k}={v}" for k, v in stats.counters.items() if k.startswith("interact."))
                print(f"\nsidecar counters: {counters}", file=out)
                print(f"memory hash: {client.memory('guard').memory_hash}", file=out)
                if interactive:
                    if interactive not in names:
                        print(f"no demo NPC {interactive!r}; choose from {', '.join(sorted(names))}", file=sys.stderr)
                        return 2
                    _chat(client, names, interactive, out, read)
        finally:
            sidecar.stop()
            owner.release()
    return 0
