"""A bundle's manifest: `bundle.json` beside its executable, saying what it was built for and the
model it ships, if any. The build writes it (`build_bundle`); the frozen entry point
(`frozen_main`) reads it, so `serve` and `demo` without `--model` use the bundle's own model and
a game launches `loreguard-sidecar serve --port N --data DIR` without naming a path on the build
machine."""

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
