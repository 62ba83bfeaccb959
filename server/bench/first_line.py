"""`loreguard bench first-line`: from launching the sidecar to the player's first words.

What a game does at start, through a real `loreguard serve` process with the embedded model on
a loopback port: launch, wait for the first `hello` (the model is loaded then), load the demo
world and register its two NPCs, then, `typing_s` later (a player reading the screen and typing
a line), send the terminal demo's first line streamed and take the time to its first chunk.

Two modes, alternated launch after launch so that both see the same machine:

- `cold`: nothing is asked of the model before the player's line;
- `warm`: both NPCs are warmed (`npc.warm`, what the addon's `warm_up` does) as soon as they
  are registered, so their static prompt is evaluated while the player types;
- `relaunch`: `warmed` on the game's second launch: the first launch (not timed) warmed the NPCs
  and the sidecar kept their evaluated prompts in its data folder (`prompt_states`), so this one
  restores them instead of evaluating; `relaunch_warm_ms` is its warm-up, beside `warmed_warm_ms`;
- `warmed`: the same, and the player's line comes `typing_s` after the warm-ups have finished
  (`warm.pending` is 0): a game that warms its NPCs when the scene loads, and a player who walks
  up to one. `warmed_warm_ms` is how long the warm-ups took, what a game must allow between
  loading the scene and the first line. A slow model on few cores cannot finish its warm-up in
  the `warm` mode's typing time (the 1.5B on 2 cores took ~18 s of a 2 s wait), so this is the
  figure `--model auto` decides on.

With `busy`, every launch of each mode is also made on a busy machine (one process spinning on
each core, as a game and a build beside the sidecar would), alternated with the quiet one.

Figures (medians over the launches of each mode): `launch_to_ready_ms`, `{mode}_first_words_ms`
(the player's line sent to the first chunk), `{mode}_launch_to_first_words_ms` (the same from
launch, `typing_s` included), `{mode}_attempts` (of the first line), `{mode}_prefill_tokens`
(what its first attempt still had to evaluate of its prompt), and
`warm_over_cold_first_words` (the ratio: below 1 is what warming saves); with `busy` the same
with a `busy_` prefix, and `busy_over_quiet_warm_first_words`. Every first line heard is printed
to stderr: read them.

Why no prefill while the player types: the first line's prompt before the player's message is
the same whatever they type (no memory is recalled yet), so the warm-up already holds it; what
is left is the player's own message (`warm_prefill_tokens`) and the decoding.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loreguard.client import Client, NoReply
from loreguard.schemas import InteractionResult
from loreguard.server.bench.streaming import warm_and_wait
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.demo.session import TURNS

MODES = ("cold", "warm", "warmed", "relaunch")
#: Modes that warm the NPCs when they are registered, and those that wait for it to finish.
_WARMS = ("warm", "warmed", "relaunch")
_WAITS = ("warmed", "relaunch")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(client: Client, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            client.hello()
            return
        except NoReply:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the sidecar did not become ready (exit {process.poll()})") from None


def _one_launch(mode: str, folder: Path, *, typing_s: float, extra: list[str]) -> dict[str, float]:
    port = _free_port()
    command = [sys.executable, "-m", "loreguard.server.cli", "serve", "--port", str(port), "--data", str(folder), *extra]
    launched = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=0.5) as probe:
            _wait_ready(probe, process, 600)
        ready = time.perf_counter()
        turn = TURNS[0]
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=600) as client:
            client.load_world(demo_world())
            profiles = demo_npcs()
            for profile in profiles:
                client.register_npc(profile)
                if mode.removeprefix("busy_") in _WARMS:
                    client.warm(profile.id)
            start_typing, warm_ms = ready, 0.0
            if mode.removeprefix("busy_") in _WAITS:
                warm_ms, _ = warm_and_wait([client], [p.id for p in profiles])
                start_typing = time.perf_counter()
            # the player reads the screen and types: the one wait here models a person
            time.sleep(max(0.0, start_typing + typing_s - time.perf_counter()))
            sent = time.perf_counter()
            first = 0.0
            result: InteractionResult | None = None
            for item in client.interact_stream(turn.npc_id, turn.player):
                if not first:
                    first = time.perf_counter()
                if isinstance(item, InteractionResult):
                    result = item
        assert result is not None
        print(f"[{mode}] {turn.npc_id}: {turn.player!r} -> {result.dialogue!r}", file=sys.stderr, flush=True)
        return {
            "launch_to_ready_ms": (ready - launched) * 1000,
            "first_words_ms": (first - sent) * 1000,
            "launch_to_first_words_ms": (first - launched) * 1000,
            "attempts": float(len(result.receipt.attempts)),
            # what was left to evaluate of the first attempt's prompt when the line arrived
            "prefill_tokens": float(result.receipt.attempts[0].tokens_evaluated),
            **({"warm_ms": warm_ms} if mode.removeprefix("busy_") in _WAITS else {}),
        }
    finally:
        process.terminate()
        process.wait(timeout=60)


def _spin() -> None:
    """Keeps one core busy, as a game or a build beside the sidecar would."""
    while True:
        pass  # the work is the loop itself


class _BusyMachine:
    """One process spinning on each core while in use."""

    def __enter__(self) -> _BusyMachine:
        self._spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 2)]
        for spinner in self._spinners:
            spinner.start()
        return self

    def __exit__(self, *_: object) -> None:
        for spinner in self._spinners:
            spinner.terminate()
        for spinner in self._spinners:
            spinner.join()


def bench_first_line(
    *, launches: int = 3, typing_s: float = 2.0, extra_args: tuple[str, ...] = (), busy: bool = False
) -> dict[str, object]:
    """`launches` launches of each mode, alternated (with `busy`, on a quiet and on a busy machine
    in turn); `extra_args` go to `serve` (a model, a device)."""
    loads = ("", "busy_") if busy else ("",)
    runs: dict[str, list[dict[str, float]]] = {load + mode: [] for load in loads for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(launches):
            for load in loads:
                for mode in MODES:
                    folder = Path(tmp) / f"{load}{mode}-{i}"
                    if mode == "relaunch":  # the game's first launch, which leaves the files
                        _one_launch(load + "warmed", folder, typing_s=0.0, extra=list(extra_args))
                    with _BusyMachine() if load else contextlib.nullcontext():
                        run = _one_launch(load + mode, folder, typing_s=typing_s, extra=list(extra_args))
                    runs[load + mode].append(run)

    def median(key: str, name: str) -> float:
        return round(statistics.median(run[name] for run in runs[key]), 1)

    figures: dict[str, object] = {"launches": launches, "typing_s": typing_s}
    for load in loads:
        figures[f"{load}launch_to_ready_ms"] = round(
            statistics.median(r["launch_to_ready_ms"] for m in MODES for r in runs[load + m]), 1
        )
        for mode in MODES:
            figures[f"{load}{mode}_first_words_ms"] = median(load + mode, "first_words_ms")
            figures[f"{load}{mode}_launch_to_first_words_ms"] = median(load + mode, "launch_to_first_words_ms")
            figures[f"{load}{mode}_attempts"] = median(load + mode, "attempts")
            figures[f"{load}{mode}_prefill_tokens"] = median(load + mode, "prefill_tokens")
        figures[f"{load}warmed_warm_ms"] = median(load + "warmed", "warm_ms")
        figures[f"{load}relaunch_warm_ms"] = median(load + "relaunch", "warm_ms")
        cold, warm = median(load + "cold", "first_words_ms"), median(load + "warm", "first_words_ms")
        figures[f"{load}warm_over_cold_first_words"] = round(warm / cold, 3) if cold else 0.0
    if busy:
        quiet = median("warm", "first_words_ms")
        figures["busy_over_quiet_warm_first_words"] = round(median("busy_warm", "first_words_ms") / quiet, 3) if quiet else 0.0
    return figures
