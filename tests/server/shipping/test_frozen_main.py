"""A bundle's entry point: the bundle's own model becomes the default of `serve` and `demo`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loreguard.server.shipping.build_bundle import EXCLUDED
from loreguard.server.shipping.frozen_main import main
from loreguard.server.shipping.manifest import with_bundled_model


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


@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "hf:fake/smol-GGUF/smol.gguf"])
def test_a_hub_model_in_a_bundle_without_the_hub_client_is_one_line(
    model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundle leaves huggingface_hub out; its entry point, given a catalogue name or an hf:
    model, says what to do instead of raising ImportError (None in sys.modules makes the import fail,
    as in the frozen executable)."""
    assert "huggingface_hub" in EXCLUDED
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    code = main(["serve", "--model", model, "--yes", "--port", "1", "--data", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"loreguard: this sidecar has no Hugging Face Hub client (a bundle leaves it out), so it cannot use {model}: "
        f"download it with the pip-installed CLI (`loreguard models pull {model}`) and pass the file's path with --model\n"
    )
    assert not (tmp_path / "data").exists() and not (tmp_path / "hf").exists()
