"""`loreguard schemas export|docs`: the wire protocol's JSON Schema and Markdown reference."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `schemas` to `loreguard`'s subcommands."""
    schemas = commands.add_parser("schemas", help="JSON Schema of the wire protocol")
    schemas_commands = schemas.add_subparsers(dest="schemas_command", required=True)
    export = schemas_commands.add_parser("export", help="write JSON Schema for every wire message")
    export.add_argument("directory", help="output folder, e.g. schemas/json")
    export.set_defaults(handler=_export)
    docs = schemas_commands.add_parser("docs", help="write the Markdown reference of every message body")
    docs.add_argument("file", help="output file, e.g. docs/protocol-messages.md")
    docs.set_defaults(handler=_docs)


def _export(args: argparse.Namespace) -> int:
    from loreguard.schemas.export import export_json_schemas

    for path in export_json_schemas(Path(args.directory)):
        print(path)
    return 0


def _docs(args: argparse.Namespace) -> int:
    from loreguard.schemas.export import protocol_reference

    path = Path(args.file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(protocol_reference(), encoding="utf-8")
    print(path)
    return 0
