"""`--model` resolution: every bad input is one line before anything loads; catalogue models get
their settings, other GGUFs a warning listing what was guessed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fake_hub import FILE, REFERENCE, REPO, FakeHub

from loreguard.server.cli import main
from loreguard.server.inference.gguf_header import write_header
from loreguard.server.inference.model_files import embedded_model_path
from loreguard.server.models import catalogue as catalogue_module
from loreguard.server.models import resolve
from loreguard.server.models.catalogue import Catalogue, CatalogueEntry, Sampling
from loreguard.server.models.pull import ModelError
from loreguard.server.models.resolve import choose_model


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("loreguard: "), err
    return err


@pytest.fixture
def fake_entry(monkeypatch: pytest.MonkeyPatch, model_bytes: bytes) -> CatalogueEntry:
    """A catalogue with one entry for the fake Hub's file, with settings unlike the defaults."""
    import hashlib

    entry = CatalogueEntry(
        name="fake-smol", params="0.1B", repo=REPO, file=FILE, revision="main", size_bytes=len(model_bytes),
        sha256=hashlib.sha256(model_bytes).hexdigest(), licence="Apache-2.0", note="test entry",
        stop_tokens=("<|im_end|>",), context=2048, kv_bytes_per_token=23040,
        sampling=Sampling(temperature=0.4, top_p=0.9, top_k=20, repeat_penalty=1.1, presence_penalty=0.2),
    )  # fmt: skip
    fake = Catalogue(models=(entry,))
    monkeypatch.setattr(catalogue_module, "load_catalogue", lambda: fake)
    monkeypatch.setattr(resolve, "load_catalogue", lambda: fake)
    return entry


def test_an_unknown_name_lists_the_closest_catalogue_names(capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["demo", "--model", "lama-3.2-3b"])
    assert "no model named 'lama-3.2-3b'" in err and "closest: llama-3.2-3b" in err


def test_a_file_that_is_not_gguf_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"PK\x03\x04 not a model")
    assert "is not a GGUF file" in _one_line_error(capsys, ["serve", "--model", str(path), "--data", str(tmp_path)])
    assert "no model file at" in _one_line_error(capsys, ["demo", "--model", str(tmp_path / "missing.gguf")])


def test_a_gguf_without_a_chat_template_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "base-model.gguf"
    write_header(path, {"general.architecture": "llama", "llama.context_length": 4096})
    assert "has no chat template" in _one_line_error(capsys, ["demo", "--model", str(path)])


def test_a_chat_template_that_does_not_render_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "odd.gguf"
    write_header(
        path, {"general.architecture": "llama", "tokenizer.chat_template": "{{ messages[0]['content'] | nosuchfilter }}"}
    )
    assert "chat template" in _one_line_error(capsys, ["demo", "--model", str(path)])
    drop_system = tmp_path / "no-system.gguf"
    write_header(drop_system, {"general.architecture": "llama", "tokenizer.chat_template": "{{ messages[-1]['content'] }}"})
    assert "does not render the system message" in _one_line_error(capsys, ["demo", "--model", str(drop_system)])


def test_a_model_over_the_memory_budget_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["demo", "--model", "embedded", "--memory-budget-mib", "300"])
    assert "more than the memory budget of 300 MiB" in err and "SmolLM2-135M" in err


def test_a_catalogue_model_not_installed_is_never_pulled_silently(hub: FakeHub, fake_entry: CatalogueEntry) -> None:
    with pytest.raises(ModelError, match="not installed: run `loreguard models pull fake-smol` first, or pass --yes"):
        choose_model("fake-smol", stdin=_Pipe(), out=io.StringIO())
    out = io.StringIO()
    with pytest.raises(ModelError, match="was not downloaded"):
        choose_model("fake-smol", stdin=_Terminal("n\n"), out=out)
    assert "fake-smol is not installed. Download about 94 MiB" in out.getvalue()
    assert hub.requests == []


def test_a_catalogue_model_is_pulled_on_yes_and_gets_its_settings(hub: FakeHub, fake_entry: CatalogueEntry) -> None:
    choice = choose_model("fake-smol", stdin=_Terminal("y\n"), out=io.StringIO())
    assert choice.entry == fake_entry and choice.guessed == ()
    assert choice.settings == {
        "n_ctx": 2048, "temperature": 0.4, "top_p": 0.9, "top_k": 20, "repeat_penalty": 1.1, "presence_penalty": 0.2,
        "stop_tokens": ("<|im_end|>",),
    }  # fmt: skip
    # Installed now: no question asked, even without a terminal, and no request to the Hub.
    seen = len(hub.requests)
    assert choose_model("fake-smol", stdin=_Pipe(), out=io.StringIO()).path == choice.path
    assert len(hub.requests) == seen


def test_an_installed_file_corrupted_on_disk_is_refused_and_removed(
    hub: FakeHub, fake_entry: CatalogueEntry, tmp_path: Path
) -> None:
    path = choose_model("fake-smol", assume_yes=True, out=io.StringIO()).path
    blob = path.resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    for marker in (tmp_path / "hf" / "loreguard-verified").iterdir():
        marker.unlink()  # as if the check had never run on this file
    with pytest.raises(ModelError, match="corrupt and has been removed"):
        choose_model("fake-smol", out=io.StringIO())
    assert not path.exists() and not blob.exists()


def test_hf_reference_of_a_catalogue_file_gets_the_catalogue_settings(hub: FakeHub, fake_entry: CatalogueEntry) -> None:
    choice = choose_model(REFERENCE, assume_yes=True, out=io.StringIO())
    assert choice.entry == fake_entry and choice.settings["temperature"] == 0.4


def test_a_gguf_outside_the_catalogue_warns_what_was_guessed() -> None:
    choice = choose_model(str(embedded_model_path()))
    assert choice.entry is None and choice.settings == {"n_ctx": 4096}
    out = io.StringIO()
    resolve.warn_guesses(choice, out)
    text = out.getvalue()
    assert "is not in the catalogue; guessed from its GGUF metadata" in text
    for what in ("chat template: the GGUF's own", "stop tokens", "<|im_end|>", "context: 4096", "trained for 8192", "sampler"):
        assert what in text


def test_the_embedded_default_keeps_the_backend_defaults() -> None:
    choice = choose_model(None)
    assert choice.path == embedded_model_path() and choice.settings == {} and choice.guessed == ()


def test_offline_and_not_installed_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set" in _one_line_error(capsys, ["demo", "--model", "qwen2.5-0.5b", "--yes"])
