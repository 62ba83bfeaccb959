"""The OpenAI-compatible backend against a real llama-cpp-python server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask
from sidecar_helpers import free_port

from loreguard.schemas import ParsedOutput
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.inference import BackendUnavailable, GenerationRequest, ScriptedBackend
from loreguard.server.pipeline.inference.models import embedded_model_path
from loreguard.server.pipeline.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_model_path()),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", str(os.cpu_count() or 1),
    ]  # fmt: skip
    # A CPU server: without the test session's lavapipe (tests/gpu_helpers.py), which llama.cpp
    # would otherwise send large batches to.
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"llama_cpp.server did not start: see {log.name}") from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("schema_mode", ["grammar", "json_object"])
def test_remote_outputs_are_schema_valid_through_the_pipeline(server_url: str, schema_mode: str, tmp_path: Path) -> None:
    config = OpenAICompatibleConfig(base_url=server_url, schema_mode=schema_mode, slots=4)
    with OpenAICompatibleBackend(config) as backend:
        recording = Recording(backend)
        pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
        lines = [("guard", "Hello, who are you?"), ("merchant", "What do you sell?"), ("guard", "Can I pass?")]
        results = [pipeline.interact(ask(line, npc=npc)) for npc, line in lines]

    assert all(r.dialogue for r in results)
    for _, generation in recording.calls:
        assert generation.finish_reason == "stop"
        assert generation.tokens_evaluated > 0
        json.loads(generation.text)
        if schema_mode == "grammar":  # our bounded grammar: strict JSON within every bound
            ParsedOutput.model_validate_json(generation.text)


@pytest.mark.model
@pytest.mark.slow
def test_remote_seed_reproduces_text(server_url: str, tmp_path: Path) -> None:
    with OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=server_url)) as backend:
        recording = Recording(backend)
        GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording).interact(ask("Good morning.", npc="guard"))
        request = recording.calls[0][0]
        assert backend.generate(request).text == backend.generate(request).text


def test_an_unreachable_server_is_a_typed_error_and_the_npc_falls_back(tmp_path: Path) -> None:
    backend = OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=f"http://127.0.0.1:{free_port()}", timeout_s=5))
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
    result = pipeline.interact(ask("Hello?", npc="guard"))
    assert result.fallback_used and result.dialogue
    assert "backend" in (result.receipt.fallback_reason or "")
    with pytest.raises(BackendUnavailable):
        backend.generate(_any_request(tmp_path))


def _any_request(tmp_path: Path) -> GenerationRequest:
    scripted = ScriptedBackend(['{"dialogue": "Hi.", "emotion": "neutral", "mutations": []}'])
    GovernancePipeline(demo_store(tmp_path / "any.sqlite"), scripted).interact(ask("Hello?", npc="guard"))
    return scripted.requests[0]


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAICompatibleBackend(OpenAICompatibleConfig(base_url="ftp://example"))
