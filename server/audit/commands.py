"""`loreguard audit export|list`, `loreguard replay` and `loreguard attach`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import TextIO

from loreguard.memory import MemoryStore
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.server.audit.package import PackageError, PackageFormat, encode_package, read_package
from loreguard.server.audit.recorder import NoRecordsError, read_records
from loreguard.server.audit.recorder import export_package as export_records
from loreguard.server.audit.replay import Replayer, ReplayReport
from loreguard.server.audit.report import record_line, result_lines, stream_lines, summary_lines
from loreguard.server.inference.base import InferenceBackend


class CommandError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def _open_log(data: Path) -> MemoryStore:
    path = data / "memory.sqlite"
    if not path.exists():
        raise CommandError(f"no Loreguard data in {data} (expected {path}); pass the folder `serve --data` or `demo --data` used")
    return MemoryStore(path)


def export_package(
    data: Path, out_file: Path, selection: PackageSelection, form: PackageFormat | None, out: TextIO | None = None
) -> int:
    """Write a debug package of the selected records; print its size in both forms."""
    out = out or sys.stdout
    with _open_log(data) as store:
        try:
            package = export_records(store, selection, exported_by=f"loreguard {version('loreguard')}")
        except NoRecordsError as exc:
            raise CommandError(str(exc)) from None
    json_bytes = encode_package(package, PackageFormat.JSON)
    compressed = encode_package(package, PackageFormat.COMPRESSED)
    form = form or (PackageFormat.JSON if out_file.suffix == ".json" else PackageFormat.COMPRESSED)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(json_bytes if form is PackageFormat.JSON else compressed)
    first, last = package.records[0].seq, package.records[-1].seq
    print(f"package: {out_file} ({form.value})", file=out)
    print(f"records: {len(package.records)} (r{first}..r{last})", file=out)
    print(f"json_bytes: {len(json_bytes)}", file=out)
    print(f"compressed_bytes: {len(compressed)}", file=out)
    print(f"compression_ratio: {len(json_bytes) / len(compressed):.1f}", file=out)
    return 0


def list_records(data: Path, selection: PackageSelection, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with _open_log(data) as store:
        records = read_records(store, selection)
    for record in records:
        print(record_line(record), file=out)
        for line in stream_lines(record):
            print(f"       {line}", file=out)
    return 0


def replay_package(
    file: Path,
    *,
    live_backend: InferenceBackend | None = None,
    step: bool = False,
    stop_on_drift: bool = False,
    profile_files: list[Path] | None = None,
    world_file: Path | None = None,
    out: TextIO | None = None,
    read: Callable[[str], str] = input,
) -> int:
    """Replay a package; exit status 1 when any record drifted."""
    out = out or sys.stdout
    try:
        package, form = read_package(file)
    except (OSError, PackageError) as exc:
        raise CommandError(f"cannot replay {file}: {exc}") from None
    profiles = {}
    for path in profile_files or []:
        profile = NpcProfile.model_validate_json(path.read_text(encoding="utf-8"))
        profiles[profile.id] = profile
    world = WorldDefinition.model_validate_json(world_file.read_text(encoding="utf-8")) if world_file else None
    replayer = Replayer(package, live_backend=live_backend, profiles=profiles, world=world)
    print(f"package: {file} ({form.value}, {len(package.records)} records, integrity verified)", file=out)
    if profiles or world:
        replaced = sorted(profiles) + (["world"] if world else [])
        print(f"replaced definitions: {', '.join(replaced)}", file=out)
    if step:
        report = _step(replayer, stop_on_drift, out, read)
    else:
        report = replayer.run(stop_on_drift=stop_on_drift)
    for line in summary_lines(report):
        print(line, file=out)
    if not step:
        print(file=out)
        for result in report.results:
            for line in result_lines(result):
                print(line, file=out)
    return 1 if report.drifts else 0


def _step(replayer: Replayer, stop_on_drift: bool, out: TextIO, read: Callable[[str], str]) -> ReplayReport:
    report = replayer.new_report()
    total = report.total
    for n, result in enumerate(replayer.steps(stop_on_drift=stop_on_drift), start=1):
        report.results.append(result)
        print(f"[{n}/{total}] {record_line(result.recorded)}", file=out)
        for line in result_lines(result, verbose=True):
            print(line, file=out)
        if n < total:
            try:
                answer = read("Enter: next record, q: stop > ").strip().lower()
            except EOFError:
                answer = "q"
            if answer == "q":
                break
        print(file=out)
    return report


def attach(
    address: str,
    *,
    npc_id: str | None = None,
    count: int | None = None,
    backlog: int = 10,
    interval_s: float = 0.25,
    out: TextIO | None = None,
) -> int:
    """Print a running sidecar's interactions as they happen (`audit.tail` with a cursor).
    Stops after `count` records when given, else on Ctrl-C."""
    out = out or sys.stdout
    from loreguard.client import Client, LoreguardError, NoReply

    shown = 0
    with Client(address, timeout_s=5) as client:
        try:
            hello = client.hello()
        except (LoreguardError, NoReply) as exc:
            raise CommandError(f"no Loreguard sidecar answers at {address}: {exc}") from None
        print(f"attached to {hello.server} at {address}; Ctrl-C detaches", file=out, flush=True)
        first = client.audit_tail(npc_id=npc_id, limit=backlog)
        cursor = first.last_seq
        records = list(first.records)
        try:
            while count is None or shown < count:
                for record in records:
                    print(record_line(record), file=out, flush=True)
                    cursor = max(cursor, record.seq)
                    shown += 1
                    if count is not None and shown >= count:
                        return 0
                time.sleep(interval_s)
                records = list(client.audit_tail(npc_id=npc_id, after=cursor, limit=100).records)
        except KeyboardInterrupt:
            print("detached", file=out)
        except (LoreguardError, NoReply) as exc:
            # The sidecar shut down or stopped answering: say so and end, no traceback.
            print(f"detached: the sidecar at {address} went away ({exc})", file=out, flush=True)
            return 1
    return 0


__all__ = ["CommandError", "attach", "export_package", "list_records", "replay_package"]
