"""`loreguard bench bundle`: a bundle's size, and its cold start to `ready` against the venv's.

`ready` is the first `hello` reply: the model is loaded and the socket serves. Both sidecars
load the same model file (the bundle's, or `--model`), one after the other, `--runs` times;
the median of each is reported.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from loreguard.client.errors import NoReply
from loreguard.client.sync import Client
from loreguard.server.shipping.build_bundle import folder_size
from loreguard.server.shipping.manifest import MANIFEST

#: A sidecar that is not ready after this long is reported as failed, not waited on forever.
READY_DEADLINE_S = 300.0


class BenchError(Exception):
    """The bundle (or the venv sidecar) is missing, has no model, or did not get to ready."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seconds_to_ready(command: Sequence[str], port: int) -> float:
    """Start `command` (a `serve` on `port`), return the seconds to its first `hello` reply, stop it."""
    # A file, not a pipe: llama.cpp's load log could fill a pipe nobody reads and stall the start.
    with tempfile.TemporaryFile("w+") as log:
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
        client = Client(f"tcp://127.0.0.1:{port}", timeout_s=0.25)
        try:
            while True:
                try:
                    client.hello("loreguard.bench")
                    return time.monotonic() - started
                except NoReply:
                    if process.poll() is not None:
                        log.seek(0)
                        raise BenchError(f"{command[0]} exited ({process.returncode}): {log.read()[-2000:]}") from None
                    if time.monotonic() - started > READY_DEADLINE_S:
                        raise BenchError(f"{command[0]} was not ready within {READY_DEADLINE_S:.0f} s") from None
        finally:
            client.close()
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run(bundle: Path, model: Path | None, runs: int) -> dict[str, object]:
    manifest_path = bundle / MANIFEST
    if not manifest_path.is_file():
        raise BenchError(f"no bundle at {bundle} (no {MANIFEST}); build one with `loreguard bundle`")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if model is None:
        if not manifest.get("model"):
            raise BenchError("the bundle has no model: pass --model FILE for both sidecars")
        model = bundle / manifest["model"]
    model_bytes = model.stat().st_size
    size = folder_size(bundle)
    bundle_times: list[float] = []
    venv_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="loreguard-bench-bundle-") as data:
        for i in range(runs):
            for times, program in (
                (bundle_times, [str(bundle / manifest["executable"])]),
                (venv_times, [sys.executable, "-m", "loreguard.server.cli"]),
            ):
                port = _free_port()
                where = Path(data) / f"{len(times)}-{i}-{port}"
                times.append(
                    seconds_to_ready([*program, "serve", "--port", str(port), "--data", str(where), "--model", str(model)], port)
                )
    bundle_s = statistics.median(bundle_times)
    venv_s = statistics.median(venv_times)
    model_in_bundle = model.resolve().is_relative_to(bundle.resolve())
    return {
        "bundle_size_mib": round(size / 2**20, 1),
        "bundle_size_without_model_mib": round((size - (model_bytes if model_in_bundle else 0)) / 2**20, 1),
        "bundle_files": sum(1 for p in bundle.rglob("*") if p.is_file()),
        "model": model.name,
        "runs": runs,
        "cold_start_bundle_s": round(bundle_s, 2),
        "cold_start_venv_s": round(venv_s, 2),
        "cold_start_ratio_bundle_over_venv": round(bundle_s / venv_s, 2),
    }
