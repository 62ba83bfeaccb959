"""`loreguard demo`: the demo conversation through the governance pipeline."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from loreguard.server.models.backends import load_with_progress, model_backend
from loreguard.server.models.cli import add_model_options, backend_choice
from loreguard.server.sidecar.cli import PROMPT_CACHE


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `demo` to `loreguard`'s subcommands."""
    demo = commands.add_parser("demo", help="run the demo conversation through the governance pipeline")
    demo.add_argument(
        "--data", help="keep memory (and the NPCs' evaluated prompts, for the next run) in this folder (default: a temporary one)"
    )
    add_model_options(demo, engine=True, default="auto")
    demo.add_argument("--scripted", action="store_true", help="replay recorded model outputs instead of running the model")
    demo.add_argument("--interactive", metavar="NPC", help="after the scripted turns, chat with this NPC (guard, merchant)")
    demo.add_argument("--seed", type=int, help="play the game with this seed again (default: a new game, a random seed)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from loreguard.server.demo.run import run_demo

    backend = None
    if not args.scripted:
        choice = backend_choice(args)
        if args.data:  # the NPCs' evaluated prompts kept with the memory, as `serve` keeps them
            choice = replace(choice, prompt_cache_dir=str(Path(args.data) / PROMPT_CACHE))
        what, load = model_backend(choice)
        backend = load_with_progress(what, load, sys.stderr)
    try:
        return run_demo(Path(args.data) if args.data else None, backend=backend, interactive=args.interactive, seed=args.seed)
    finally:
        if backend is not None:
            backend.close()
