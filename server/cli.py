"""`loreguard` command line: one entry point; each subpackage registers its own subcommands
(a `register(commands)` in its `cli` module) and imports its work only when it runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from loreguard.schemas import cli as schemas_cli
from loreguard.server.audit import cli as audit_cli
from loreguard.server.bench import cli as bench_cli
from loreguard.server.demo import cli as demo_cli
from loreguard.server.models import cli as models_cli
from loreguard.server.shipping import cli as shipping_cli
from loreguard.server.sidecar import cli as sidecar_cli

#: In the order `loreguard --help` lists them.
REGISTRARS = (
    schemas_cli.register,  # schemas export|docs
    demo_cli.register,  # demo
    sidecar_cli.register,  # serve
    audit_cli.register,  # audit export|list, replay, attach
    bench_cli.register,  # bench SUITE
    shipping_cli.register,  # bundle, addon-zip
    models_cli.register,  # models list|pull
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loreguard", description="Governed LLM dialogue for game NPCs.")
    commands = parser.add_subparsers(dest="command", required=True)
    for register in REGISTRARS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from loreguard.server.audit.commands import CommandError
    from loreguard.server.inference.base import BackendError
    from loreguard.server.models.pull import ModelError
    from loreguard.server.sidecar.transport import CannotListen

    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    # BackendError here is a model that could not start (a device this build lacks, one too
    # small, a context the driver refused): one line, before anything was served.
    except (CommandError, ModelError, BackendError) as exc:
        print(f"loreguard: {exc}", file=sys.stderr)
        return 2
    except CannotListen as exc:  # no traceback: one line a launcher can show
        print(f"loreguard: {exc}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
