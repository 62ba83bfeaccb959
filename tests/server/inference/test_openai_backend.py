"""The remote backend against a real llama-cpp-python server (`llama_cpp.server`) on loopback,
serving the embedded model: chat and raw completions, streaming, continuation."""

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
from loreguard.server.inference import GenerationRequest
from loreguard.server.inference.model_files import embedded_model_path
from loreguard.server.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig
from loreguard.server.models.backends import _chat_template
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.running.streaming import ReleasedChunk, StreamSession, continuation_prefix

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_model_path()),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", str(os.cpu_count() or 1),
        # Its default cuts a stream short when another request arrives (docs/remote-engines.md).
        "--interrupt_requests", "False",
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


def _backend(url: str, route: str, schema_mode: str = "auto") -> OpenAICompatibleBackend:
    template = _chat_template("embedded") if route == "raw" else {}
    return OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=url, schema_mode=schema_mode, **template))  # type: ignore[arg-type]


@pytest.mark.parametrize(("route", "schema_mode"), [("chat", "grammar"), ("chat", "json_object"), ("raw", "grammar")])
def test_remote_outputs_are_schema_valid_through_the_pipeline(
    server_url: str, route: str, schema_mode: str, tmp_path: Path
) -> None:
    with _backend(server_url, route, schema_mode) as backend:
        assert backend.engine.kind == "llama-cpp-python" and backend.max_concurrency == 1
        assert backend.continues_output is (route == "raw" and schema_mode != "json_object")
        recording = Recording(backend)
        pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
        results = [
            pipeline.interact(ask(line, npc=npc))
            for npc, line in [("guard", "Hello, who are you?"), ("merchant", "What do you sell?")]
        ]

    assert all(r.dialogue for r in results)
    for _, generation in recording.calls:
        assert generation.finish_reason == "stop" and generation.tokens_generated > 0
        # The server's own json_object grammar lets a raw newline into a string (the 135M wrote one
        # on a retry); the parser's tolerant path reads it. Our grammar writes strict JSON.
        json.loads(generation.text, strict=schema_mode == "grammar")
        if schema_mode == "grammar":  # our bounded grammar: strict JSON within every bound
            ParsedOutput.model_validate_json(generation.text)


def test_a_streamed_reply_is_released_before_the_model_ends_and_never_taken_back(server_url: str, tmp_path: Path) -> None:
    with _backend(server_url, "raw") as backend:
        recording = Recording(backend)
        pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
        early = 0
        for line in ("Good evening. When does the gate close?", "What news from the hills?", "Tell me about the town."):
            chunks: list[tuple[ReleasedChunk, int]] = []
            done_before = len(recording.calls)
            result = pipeline.interact(
                ask(line, npc="guard"),
                stream=StreamSession(emit=lambda c, chunks=chunks: chunks.append((c, len(recording.calls)))),
            )
            assert "".join(c.text for c, _ in chunks) == result.dialogue  # released_then_rejected: 0
            # A chunk released while its own attempt was still generating (not yet recorded).
            early += any(c.attempt and calls_then < done_before + c.attempt for c, calls_then in chunks)
        assert early >= 1, "no chunk of three streamed replies reached the game before its generation ended"


def test_a_raw_completion_continues_the_words_already_shown(server_url: str, tmp_path: Path) -> None:
    with _backend(server_url, "raw") as backend:
        recording = Recording(backend)
        GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording).interact(ask("Good morning.", npc="guard"))
        first = recording.calls[0][0]
        prefix = continuation_prefix("Halt! State your business")
        request = GenerationRequest.model_validate({**first.model_dump(), "output_prefix": prefix, "seed": 7})
        generation = backend.generate(request)
    assert generation.text.startswith(prefix) and generation.finish_reason == "stop"
    assert ParsedOutput.model_validate_json(generation.text).dialogue.startswith("Halt! State your business")


def test_a_stop_ends_the_remote_generation_and_the_server_serves_on(server_url: str, tmp_path: Path) -> None:
    with _backend(server_url, "chat") as backend:
        recording = Recording(backend)
        GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording).interact(ask("Good evening.", npc="guard"))
        request = recording.calls[0][0]
        seen: list[str] = []
        stopped = backend.generate_streaming(request, lambda text: seen.append(text) or len(seen) < 3)
        assert stopped.finish_reason == "aborted" and len(seen) == 3
        whole = backend.generate(request)
        assert whole.finish_reason == "stop" and len(whole.text) > len(stopped.text)
        assert backend.generate(request).text == whole.text  # the seed reproduces the text
