"""The remote backend against the stand-in engine (server/bench/stand_in_engine.py) on loopback:
concurrency, streaming, prefix reuse, every failure a typed outcome, bad servers refused."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_helpers import demo_store
from pipeline_helpers import ask
from sidecar_helpers import free_port
from waiting import wait_for

from loreguard.client import AsyncClient
from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionOutcome
from loreguard.server.bench.inference import bench_profiles, bench_world
from loreguard.server.bench.stand_in_engine import StandInConfig, StandInEngine
from loreguard.server.cli import main
from loreguard.server.inference import BackendTimeout
from loreguard.server.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig, SlotTable
from loreguard.server.inference.remote_engine import RemoteEngineError
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig


@pytest.fixture
def stand_in() -> Iterator[list[StandInEngine]]:
    """Start stand-ins with `started.append(StandInEngine(...).start())`; all stop afterwards."""
    started: list[StandInEngine] = []
    yield started
    for engine in started:
        engine.stop()


def _start(started: list[StandInEngine], **config: object) -> StandInEngine:
    engine = StandInEngine(StandInConfig(**config)).start()  # type: ignore[arg-type]
    started.append(engine)
    return engine


def _backend(engine: StandInEngine, **config: object) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=engine.url, **config))  # type: ignore[arg-type]


def test_the_server_says_its_slots_and_the_sidecar_runs_that_many_npcs_at_once(
    stand_in: list[StandInEngine], tmp_path: Path
) -> None:
    # `gather`: each generation waits until 8 are in flight; a sidecar that sent one at a time
    # would show a peak of 1 (after a minute's wait), however fast the machine.
    engine = _start(stand_in, slots=8, token_ms=1, gather=8)
    backend = _backend(engine)
    assert backend.max_concurrency == 8 and backend.engine.slots_from == "server"
    store = MemoryStore(tmp_path / "memory.sqlite")
    store.load_world(bench_world())
    profiles = bench_profiles(8, facts=2)
    for profile in profiles:
        store.register_npc(profile)
    sidecar = Sidecar(store, backend, SidecarConfig(port=0, request_timeout_ms=120_000))
    sidecar.start()

    async def everyone() -> list[str]:
        async def one(npc: str) -> str:
            async with AsyncClient(sidecar.address, timeout_s=120) as client:
                return (await client.interact(npc, "Good morning. Any news?")).dialogue

        return await asyncio.gather(*(one(p.id) for p in profiles))

    try:
        lines = asyncio.run(everyone())
    finally:
        sidecar.stop()
        backend.close()
    assert all(lines) and engine.stats.peak_in_flight == 8


def test_a_streamed_reply_grows_and_a_stop_closes_the_remote_stream(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=2, token_ms=5)
    backend = _backend(engine)
    scripted = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
    result = scripted.interact(ask("Hello there.", npc="guard"))
    assert result.outcome is InteractionOutcome.VALIDATED
    seen: list[str] = []

    def observe(text: str) -> bool:
        seen.append(text)
        return len(seen) < 3

    request = _request_for(backend, tmp_path)
    stopped = backend.generate_streaming(request, observe)
    assert stopped.finish_reason == "aborted" and len(seen) == 3
    assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(seen, seen[1:], strict=False))
    wait_for(lambda: engine.stats.dropped == 1, "the stand-in to see the stream closed and stop generating")
    whole = backend.generate(request)
    assert whole.finish_reason == "stop" and whole.text.startswith(seen[-1][:4])
    backend.close()


def _request_for(backend: OpenAICompatibleBackend, tmp_path: Path):  # type: ignore[no-untyped-def]
    from model_helpers import Recording

    recording = Recording(backend)
    GovernancePipeline(demo_store(tmp_path / "req.sqlite"), recording).interact(ask("Good evening.", npc="guard"))
    return recording.calls[0][0]


@pytest.mark.parametrize("share", [0, 2])
def test_each_npc_keeps_its_slot_so_its_prefix_is_reused(share: int, stand_in: list[StandInEngine], tmp_path: Path) -> None:
    # share 0: this sidecar has all the server's slots and gives each NPC its own; 2: a share of
    # a server other sidecars use too, where the server picks the slot with the most alike prompt.
    engine = _start(stand_in, slots=2 if not share else 4, token_ms=0)
    backend = _backend(engine, slots=share)
    assert backend.max_concurrency == 2 and backend.engine.slots_from == ("user" if share else "server")
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
    first = {npc: pipeline.interact(ask("Hello.", npc=npc)) for npc in ("guard", "merchant")}
    second = {npc: pipeline.interact(ask("And the weather?", npc=npc)) for npc in ("guard", "merchant")}
    for npc in ("guard", "merchant"):
        assert (second[npc].receipt.kv_hit_rate or 0) > 0.6, (
            npc,
            first[npc].receipt.kv_hit_rate,
            second[npc].receipt.kv_hit_rate,
        )
    backend.close()


def test_a_slot_goes_back_to_the_npc_that_used_it() -> None:
    table = SlotTable(2)
    a, b = table.take("guard"), table.take("merchant")
    table.give_back(a, "guard")
    table.give_back(b, "merchant")
    assert table.take("merchant") == b and table.take("guard") == a
    assert table.take("smith") is None  # both in use: the server picks


def test_an_unreachable_server_falls_back_with_nothing_applied(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=0)
    backend = _backend(engine, retry=2)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
    engine.stop()
    stand_in.remove(engine)
    result = pipeline.interact(ask("Hello?", npc="guard"))
    assert result.fallback_used and result.dialogue and not result.intents
    assert result.receipt.backend_failure == "unreachable"
    assert result.receipt.memory_hash_before == result.receipt.memory_hash_after
    assert "the model server is unreachable" in (result.receipt.fallback_reason or "")
    backend.close()


def test_5xx_is_retried_with_backoff(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=0, fail_statuses=[503, 502])
    backend = _backend(engine, retry=3)
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask("Hello?", npc="guard"))
    assert result.outcome is InteractionOutcome.VALIDATED and engine.stats.requests == 3
    backend.close()


def test_429_waits_for_retry_after_when_the_deadline_allows(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=0, fail_statuses=[429], retry_after_s=0.2)
    backend = _backend(engine)
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask("Hello?", npc="guard"))
    assert result.outcome is InteractionOutcome.VALIDATED and engine.stats.requests == 2
    backend.close()


def test_429_asking_longer_than_the_deadline_is_busy_at_once(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=0, fail_statuses=[429], retry_after_s=600)
    backend = _backend(engine, timeout_s=30)
    started = time.monotonic()
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask("Hello?", npc="guard"))
    assert result.fallback_used and result.receipt.backend_failure == "busy"
    assert time.monotonic() - started < 30  # it did not wait out the 600 s
    backend.close()


def test_a_stalled_stream_is_a_timeout(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    # A whole reply sends nothing until it is written: only the deadline (3 s) limits it. A
    # streamed one that goes silent for stall_s (1 s) has stalled.
    engine = _start(stand_in, slots=1, token_ms=0, stall_after_tokens=3)
    backend = _backend(engine, stall_s=1.0, retry=1, timeout_s=3.0)
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask("Hello?", npc="guard"))
    assert result.fallback_used and result.receipt.backend_failure == "timeout", result.receipt.fallback_reason
    assert not backend.circuit_open()  # its own deadline is not the server's failure
    with backend, pytest.raises(BackendTimeout, match="sent nothing for 1 s in the middle of a reply"):
        backend.generate_streaming(_any_request(tmp_path), lambda text: True)
    wait_for(lambda: engine.stats.dropped == 2, "the stand-in to see both stalled requests closed")


def _any_request(tmp_path: Path):  # type: ignore[no-untyped-def]
    from loreguard.server.inference import ScriptedBackend

    scripted = ScriptedBackend(['{"dialogue": "Hi.", "emotion": "neutral", "mutations": []}'])
    GovernancePipeline(demo_store(tmp_path / "any.sqlite"), scripted).interact(ask("Hello?", npc="guard"))
    return scripted.requests[0]


def test_the_circuit_opens_after_repeated_failures_and_queued_interactions_fail_fast(
    stand_in: list[StandInEngine], tmp_path: Path
) -> None:
    engine = _start(stand_in, slots=1, token_ms=0, fail_statuses=[503, 503, 503, 503])
    backend = _backend(engine, retry=3, circuit_threshold=3, circuit_cooldown_s=600)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend)
    first = pipeline.interact(ask("Hello?", npc="guard"))
    assert first.receipt.backend_failure == "unreachable" and engine.stats.requests == 3
    assert backend.circuit_open()
    later = pipeline.interact(ask("Anyone there?", npc="merchant"))
    assert later.receipt.backend_failure == "unreachable" and "failed 3 times in a row" in (later.receipt.fallback_reason or "")
    assert engine.stats.requests == 3  # refused without asking the server
    backend.close()


def test_a_prompt_longer_than_the_servers_context_is_a_typed_error(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=0, n_ctx=300)
    backend = _backend(engine)
    result = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), backend).interact(ask("Hello?", npc="guard"))
    assert result.fallback_used and result.receipt.backend_failure == "error"
    assert "exceeds the available context size" in (result.receipt.fallback_reason or "")
    backend.close()


def test_bad_servers_are_refused_in_one_line(stand_in: list[StandInEngine]) -> None:
    with pytest.raises(RemoteEngineError, match="http:// or https://"):
        OpenAICompatibleBackend(OpenAICompatibleConfig(base_url="ftp://example"))
    with pytest.raises(RemoteEngineError, match="unreachable.*is the model server running"):
        OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=f"http://127.0.0.1:{free_port()}"))
    engine = _start(stand_in, slots=1)
    with pytest.raises(RemoteEngineError, match="has no model 'llama-70b'; it serves: stand-in"):
        OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=engine.url, model="llama-70b"))
    with _html_server() as url, pytest.raises(RemoteEngineError, match="not JSON"):
        OpenAICompatibleBackend(OpenAICompatibleConfig(base_url=url))


class _Html(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>a web page</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet: a request line per GET would only clutter the test's output."""


class _html_server:
    def __enter__(self) -> str:
        self.server = http.server.HTTPServer(("127.0.0.1", 0), _Html)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_serve_checks_the_server_before_it_listens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code = main(["serve", "--backend", "openai", "--base-url", url, "--data", str(tmp_path / "data"), "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"loreguard: the model server is unreachable: {url}" in err and "listening" not in err
    assert f"could not load remote model at {url}" in err and "loaded" not in err


def test_a_warm_up_evaluates_the_npcs_prompt_into_the_slot_it_will_use(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=2, token_ms=0)
    with _backend(engine, chat_template="chatml") as backend:
        request = _any_request(tmp_path)
        warmed = backend.warm("guard", request.prompt)
        assert warmed.outcome == "warmed" and warmed.tokens_evaluated == warmed.tokens > 0
        again = backend.warm("guard", request.prompt)
        assert again.outcome == "already" and again.tokens_evaluated <= 1


def test_a_reply_still_coming_at_the_deadline_is_cut_there(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=300)  # a reply of ~30 tokens takes ~9 s
    with _backend(engine, timeout_s=1.0, stall_s=10.0) as backend:
        started = time.monotonic()
        with pytest.raises(BackendTimeout, match="deadline"):
            backend.generate_streaming(_any_request(tmp_path), lambda text: True)
        assert time.monotonic() - started < 8  # not the reply's 9 s, nor the 10 s stall limit
        assert not backend.circuit_open()
    wait_for(lambda: engine.stats.dropped == 1, "the stand-in to see the stream closed at the deadline")


def test_the_circuit_lets_one_call_try_after_its_cooldown() -> None:
    from loreguard.server.inference import BackendUnavailable
    from loreguard.server.inference.remote_http import CircuitBreaker

    breaker = CircuitBreaker(threshold=2, cooldown_s=0.0)
    breaker.failed()
    breaker.before_call("x")  # one failure: still closed
    breaker.failed()
    assert breaker.is_open and breaker.opened == 1
    breaker.before_call("x")  # the cooldown (0 s) is over: this call is the trial
    with pytest.raises(BackendUnavailable, match="failed 2 times in a row"):
        breaker.before_call("x")  # the others still fail fast while it runs
    breaker.settle()  # the trial gave up before the server said anything
    breaker.before_call("x")  # so the next call tries
    breaker.succeeded()
    assert not breaker.is_open
    breaker.before_call("x")


def test_max_tokens_is_honoured_and_a_cut_off_reply_says_length(stand_in: list[StandInEngine], tmp_path: Path) -> None:
    engine = _start(stand_in, slots=1, token_ms=0)
    with _backend(engine) as backend:
        request = _any_request(tmp_path).model_copy(update={"output_schema": None, "max_tokens": 3})
        whole = backend.generate(request)
        streamed = backend.generate_streaming(request, lambda text: True)
    assert whole.finish_reason == streamed.finish_reason == "length"
    assert whole.text == streamed.text and len(whole.text) == 12 and whole.tokens_generated == 3  # 3 tokens of 4 characters
