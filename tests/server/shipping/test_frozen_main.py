"""A bundle's entry point: the bundle's own model becomes the default of `serve` and `demo`."""

from __future__ import annotations

import json
from pathlib import Path

from loreguard.server.shipping.frozen_main import with_bundled_model


def _bundle(folder: Path, model: str | None) -> Path:
    (folder / "bundle.json").write_text(json.dumps({"model": model}))
    return folder


def test_serve_without_a_model_gets_the_bundles(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "models/m.gguf")
    assert with_bundled_model(["serve", "--port", "1"], folder) == [
        "serve",
        "--port",
        "1",
        "--model",
        str(tmp_path / "models/m.gguf"),
    ]
    assert with_bundled_model(["demo"], folder) == ["demo", "--model", str(tmp_path / "models/m.gguf")]


def test_a_named_model_wins(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "models/m.gguf")
    assert with_bundled_model(["serve", "--model", "x.gguf"], folder) == ["serve", "--model", "x.gguf"]
    assert with_bundled_model(["serve", "--model=x.gguf"], folder) == ["serve", "--model=x.gguf"]


def test_other_commands_and_model_less_bundles_are_untouched(tmp_path: Path) -> None:
    assert with_bundled_model(["audit", "list"], _bundle(tmp_path, "models/m.gguf")) == ["audit", "list"]
    assert with_bundled_model(["serve"], _bundle(tmp_path, None)) == ["serve"]
    assert with_bundled_model(["serve"], tmp_path / "no-bundle-here") == ["serve"]
    assert with_bundled_model([], tmp_path) == []
