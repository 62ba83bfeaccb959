"""The entry point of a frozen bundle: `loreguard` with the bundle's own model as the default.

A bundle carries `bundle.json` beside its executable (what it was built for, and the model it
ships, if any). `serve` and `demo` without `--model` use that model, so a game launches
`loreguard-sidecar serve --port N --data DIR` and nothing names a path on the build machine.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

MANIFEST = "bundle.json"
#: Commands that load a model and take `--model`.
MODEL_COMMANDS = ("serve", "demo")


def bundle_dir() -> Path:
    """The folder holding the bundle's executable (frozen) or this file's checkout (from source)."""
    return Path(sys.executable).resolve().parent


def with_bundled_model(argv: Sequence[str], folder: Path) -> list[str]:
    """`argv` plus `--model <the bundle's model>` when a model command names none and the bundle has one."""
    args = list(argv)
    if not args or args[0] not in MODEL_COMMANDS or any(a == "--model" or a.startswith("--model=") for a in args):
        return args
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return args
    model = json.loads(manifest.read_text(encoding="utf-8")).get("model")
    if not model:
        return args
    return [*args, "--model", str(folder / model)]


def main(argv: Sequence[str] | None = None) -> int:
    from loreguard.server.cli import main as cli_main
    from loreguard.server.pipeline.inference.base import BackendError
    from loreguard.server.pipeline.inference.models import ModelNotFound

    args = sys.argv[1:] if argv is None else argv
    try:
        return cli_main(with_bundled_model(args, bundle_dir()))
    except (BackendError, ModelNotFound) as exc:
        # A player's log gets the reason in one line, not a frozen traceback.
        print(f"loreguard-sidecar: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
