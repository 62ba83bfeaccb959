"""`loreguard demo`: the demo conversation through the governance pipeline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loreguard.server.models.backends import load_with_progress, model_backend
from loreguard.server.models.cli import add_model_options, backend_choice


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `demo` to `loreguard`'s subcommands."""
    demo = commands.add_parser("demo", help="run the demo conversation through the governance pipeline")
    demo.add_argument("--data", help="keep memory in this folder (default: a temporary one)")
    add_model_options(demo, engine=True, default="auto")
    demo.add_argument("--scripted", action="store_true", help="replay recorded model outputs instead of running the model")
    demo.add_argument("--interactive", metavar="NPC", help="after the scripted turns, chat with this NPC (guard, merchant)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from loreguard.server.demo.run import run_demo

    backend = None
    if not args.scripted:
        what, load = model_backend(backend_choice(args))
        backend = load_with_progress(what, load, sys.stderr)
    try:
        return run_demo(Path(args.data) if args.data else None, backend=backend, interactive=args.interactive)
    finally:
        if backend is not None:
            backend.close()
