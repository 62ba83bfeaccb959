from __future__ import annotations

from pathlib import Path

import pytest

from loreguard.server.inference.gguf_header import NotGGUF, read_header, write_header
from loreguard.server.inference.model_files import embedded_model_path


def test_reads_the_embedded_models_metadata() -> None:
    header = read_header(embedded_model_path())
    assert header.architecture == "llama"
    assert header.context_length == 8192
    assert header.chat_template and "<|im_start|>" in header.chat_template
    assert header.token("tokenizer.ggml.eos_token_id") == "<|im_end|>"


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("hello")
    with pytest.raises(NotGGUF, match="not a GGUF file"):
        read_header(path)


def test_a_truncated_header_is_refused(tmp_path: Path) -> None:
    full = tmp_path / "full.gguf"
    write_header(full, {"general.architecture": "llama", "llama.context_length": 2048})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[:-3])
    assert read_header(full).context_length == 2048
    with pytest.raises(NotGGUF, match="truncated"):
        read_header(cut)
