"""`loreguard serve`: load the model (with a progress line), bind, serve until SIGINT/SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from loreguard.memory import DataFolderLock, FolderInUseError, MemoryStore, MemoryStoreError
from loreguard.server.inference.base import InferenceBackend
from loreguard.server.models.backends import load_with_progress
from loreguard.server.pipeline import PipelineConfig
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.sidecar.lifeline import ParentWatch, is_alive
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig
from loreguard.server.sidecar.watchdog import StallWatch

#: The exit code when another sidecar owns the data folder (the Godot launcher says so).
EXIT_FOLDER_IN_USE = 4


@dataclass(frozen=True)
class JudgeSetup:
    """The optional semantic judge gate: `off`; `keyword` (its deterministic check only); or
    `model`: a model asked first, the keyword check standing in when it fails or takes longer
    than `timeout_ms`. `factory` loads the judge's own model; None shares the dialogue model."""

    mode: Literal["off", "keyword", "model"] = "off"
    timeout_ms: int = 3000
    factory: Callable[[], InferenceBackend] | None = None
    what: str = "the dialogue model"
    #: Why `--judge auto` left the judge off, said in one line at start ("": nothing to say).
    off_because: str = ""

    def describe(self) -> str:
        if self.mode == "keyword":
            return "keyword check"
        return f"{self.what}, keyword check after {self.timeout_ms} ms or a failure"


def serve(
    backend_factory: Callable[[], InferenceBackend],
    what: str,
    data: Path,
    config: SidecarConfig,
    out: TextIO | None = None,
    *,
    judge: JudgeSetup | None = None,
    parent_pid: int | None = None,
    stall_limit_s: float = 0.0,
    stop_file: Path | None = None,
    owner: DataFolderLock | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM, or until process `parent_pid` (the game that launched this
    sidecar) dies or creates `stop_file`: then the sidecar stops as on SIGTERM, or at once while
    still loading. With
    `stall_limit_s`, a model call that has not returned in that long (a GPU driver that stopped
    answering) ends the process with exit code 3, for the launcher to restart it (watchdog.py).
    `owner` is the data folder's lock (taken already when the folder existed); serve takes it once
    the folder exists, or exits with code 4 when another sidecar holds it."""
    out = out if out is not None else sys.stderr  # looked up now: a default bound at import goes stale
    running: list[Sidecar] = []
    watch = None
    if parent_pid is not None:
        if not is_alive(parent_pid):
            print(f"the launching process {parent_pid} is not running; not starting", file=out, flush=True)
            return 1

        def parent_died() -> None:
            why = "asked the sidecar to stop" if watch is not None and watch.asked else "is gone; stopping"
            print(f"the launching process {parent_pid} {why}", file=out, flush=True)
            if running:
                running[0].request_stop()
            else:
                os._exit(0)  # still loading the model: nothing written yet worth a flush

        watch = ParentWatch(parent_pid, parent_died, stop_file=stop_file).start()
    data.mkdir(parents=True, exist_ok=True)
    if not take_data_folder(owner if owner is not None else DataFolderLock(data), out):
        return EXIT_FOLDER_IN_USE
    try:  # before the model: a memory file that cannot be read stops the launch in a second, not a minute
        store = MemoryStore(data / "memory.sqlite")
    except MemoryStoreError as exc:
        print(f"cannot open the memory file: {exc}", file=out, flush=True)
        return 2
    backend = load_with_progress(what, backend_factory, out)
    judge = judge or JudgeSetup()
    judge_backend = _judge_backend(judge, backend, out)
    pipeline_config = PipelineConfig(gate=GateConfig(semantic_judge=judge.mode != "off"), judge_timeout_ms=judge.timeout_ms)
    sidecar = Sidecar(store, backend, config, pipeline_config=pipeline_config, judge_backend=judge_backend)
    running.append(sidecar)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sidecar.request_stop())
    stalls = _stall_watch(backend, stall_limit_s, out)
    # A launched sidecar's output is the game's Output panel: Ctrl-C is no advice there.
    stops = "it stops with the game that launched it" if parent_pid is not None else "Ctrl-C stops it"
    print(f"loreguard sidecar listening on {sidecar.address} (data in {data}); {stops}", file=out, flush=True)
    try:
        sidecar.serve_forever()
    finally:
        if stalls is not None:
            stalls.stop()
        if watch is not None:
            watch.stop()
        if judge_backend is not None and judge_backend is not backend:
            judge_backend.close()
        backend.close()
    print("loreguard sidecar stopped: replies sent, memory flushed", file=out, flush=True)
    return 0


def _judge_backend(judge: JudgeSetup, backend: InferenceBackend, out: TextIO) -> InferenceBackend | None:
    """The semantic judge's model (its own, loaded now, or the dialogue model's), None without a
    model judge; the judge's setting said in one line."""
    if judge.mode != "off":
        print(f"semantic judge: {judge.describe()}", file=out, flush=True)
    elif judge.off_because:
        print(f"semantic judge: off, {judge.off_because} (--judge model turns it on)", file=out, flush=True)
    if judge.mode != "model":
        return None
    return load_with_progress(judge.what, judge.factory, out) if judge.factory else backend


def take_data_folder(owner: DataFolderLock, out: TextIO | None = None) -> bool:
    """Take the data folder's lock (at once when it is held already); False, with its one line
    said, when another sidecar holds it."""
    try:
        owner.acquire()
    except FolderInUseError as exc:
        print(f"loreguard: {exc}", file=out if out is not None else sys.stderr, flush=True)
        return False
    return True


def _stall_watch(backend: InferenceBackend, stall_limit_s: float, out: TextIO) -> StallWatch | None:
    """On a GPU, a watch that ends the process (exit code 3) when one model call has not
    returned in `stall_limit_s`; None on a CPU or with no limit. A CPU decode ends when its
    arithmetic does (a large model's prefill on a slow machine can take minutes), while a GPU
    driver that stopped answering never returns."""
    where = backend.fingerprint().extra.get("device", "cpu")
    if stall_limit_s <= 0 or where == "cpu":
        return None

    def stalled(seconds: float) -> None:
        print(
            f"llama.cpp has not returned from one decode on {where} in {seconds:.0f} s: the GPU driver stopped "
            "answering; exiting (code 3) so the launcher starts a new sidecar",
            file=out, flush=True,
        )  # fmt: skip
        os._exit(3)

    return StallWatch(backend.stalled_s, stall_limit_s, stalled).start()
