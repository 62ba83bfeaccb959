"""`loreguard audit export|list`, `loreguard replay` and `loreguard attach` (the work is in
`audit.commands`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from loreguard.server.models.backends import load_with_progress, model_backend
from loreguard.server.models.cli import add_model_options, backend_choice

if TYPE_CHECKING:
    from loreguard.schemas.audit import PackageSelection


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `audit`, `replay` and `attach` to `loreguard`'s subcommands."""
    audit = commands.add_parser("audit", help="the audit log: list records, export debug packages")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    audit_export = audit_commands.add_parser("export", help="write a debug package of recorded interactions")
    _add_selection_options(audit_export)
    audit_export.add_argument("--out", required=True, help="package file: *.json for JSON, anything else compressed")
    audit_export.add_argument("--format", choices=["json", "compressed"], help="override the form the file name picks")
    audit_export.set_defaults(handler=_audit_export)
    audit_list = audit_commands.add_parser("list", help="one line per recorded interaction")
    _add_selection_options(audit_list)
    audit_list.set_defaults(handler=_audit_list)

    replay = commands.add_parser("replay", help="replay a debug package and report drift (exit 1 on drift)")
    replay.add_argument("file", help="a debug package (JSON or compressed)")
    replay.add_argument("--live", action="store_true", help="run the current model with the recorded seeds (output drift)")
    replay.add_argument("--step", action="store_true", help="one record at a time, with its prompt diff and gate table")
    replay.add_argument("--stop-on-drift", action="store_true", help="stop at the first record that drifted")
    replay.add_argument("--profile", action="append", default=[], help="replace an NPC profile with this JSON file")
    replay.add_argument("--world", help="replace the world definition with this JSON file")
    add_model_options(replay)
    replay.set_defaults(handler=_replay)

    attach = commands.add_parser("attach", help="follow a running sidecar's interactions live")
    attach.add_argument("--address", default="tcp://127.0.0.1:7878")
    attach.add_argument("--npc", help="only this NPC")
    attach.add_argument("--count", type=int, help="exit after N records (default: until Ctrl-C)")
    attach.add_argument("--backlog", type=int, default=10, help="recent records to show first")
    attach.set_defaults(handler=_attach)


def _add_selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default="loreguard-data", help="the data folder `serve --data` or `demo --data` used")
    parser.add_argument("--npc", help="only this NPC's records")
    parser.add_argument("--last", type=int, help="only the newest N records")
    parser.add_argument("--from", dest="first", type=int, help="first log position (record rN)")
    parser.add_argument("--to", type=int, help="last log position")


def _selection(args: argparse.Namespace) -> PackageSelection:
    from loreguard.schemas.audit import PackageSelection

    return PackageSelection(npc_id=args.npc, last=args.last, first_seq=args.first, last_seq=args.to)


def _audit_export(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import export_package
    from loreguard.server.audit.package import PackageFormat

    form = PackageFormat(args.format) if args.format else None
    return export_package(Path(args.data), Path(args.out), _selection(args), form)


def _audit_list(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import list_records

    return list_records(Path(args.data), _selection(args))


def _replay(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import replay_package

    backend = None
    if args.live:
        # A recorded seed replays the same text only without batch effects.
        what, load = model_backend(backend_choice(args, reproducible=True))
        backend = load_with_progress(what, load, sys.stderr)
    try:
        return replay_package(
            Path(args.file),
            live_backend=backend,
            step=args.step,
            stop_on_drift=args.stop_on_drift,
            profile_files=[Path(p) for p in args.profile],
            world_file=Path(args.world) if args.world else None,
        )
    finally:
        if backend is not None:
            backend.close()


def _attach(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import attach

    return attach(args.address, npc_id=args.npc, count=args.count, backlog=args.backlog)
