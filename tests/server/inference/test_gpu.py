"""The engine on a GPU, through llama.cpp's Vulkan backend on Mesa's lavapipe (tests/gpu_helpers.py):
every layer offloaded; the grammar, two NPCs at once, shared prefixes, the host spill, streaming
with a cut and a continuation and warm-ups doing exactly what they do on the CPU; the sidecar
launched as the Godot addon launches it. CI runs these on every landing (`-m gpu` alone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_helpers import require_gpu, write_small_model
from shipping_helpers import wait_until_ready
from sidecar_helpers import free_port

from loreguard.client import Client
from loreguard.schemas import InteractionOutcome
from loreguard.schemas.prompt import SITUATION_HEADING, Prompt
from loreguard.server.bench.sidecar import load_npcs
from loreguard.server.demo import demo_world
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.inference.devices import DeviceError, available_devices, choose_device
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.model_files import embedded_model_path

# Also `model`: the fast suite (`-m "not slow and not model"`) leaves them out.
pytestmark = [pytest.mark.gpu, pytest.mark.model]


@pytest.fixture(autouse=True, scope="module")
def _on_lavapipe() -> None:
    require_gpu()


#: A short answer: the grammar still opens and closes the JSON, in few tokens (lavapipe is slow).
SHORT = {
    "type": "object",
    "properties": {"dialogue": {"type": "string", "maxLength": 24}},
    "required": ["dialogue"],
    "additionalProperties": False,
}
PERSONAS = {
    "guard": "You are Brom, the gate guard of Eldmoor. The north gate closes at dusk and opens at dawn.",
    "merchant": "You are Mira, a merchant of Eldmoor. A lantern costs 5 silver; rope costs 2.",
    "smith": "You are Hald, the smith of Eldmoor. You mend blades and shoe horses.",
}


def _request(npc: str, line: str, *, seed: int = 7, earlier: tuple[str, ...] = ()) -> GenerationRequest:
    # Earlier lines lengthen the NPC's own conversation, so a repeat turn extends its prompt.
    said = "".join(f"The player said before: {e}\n" for e in earlier)
    # The new message opens with a heading, as the pipeline's do: a warm-up stops before it.
    turn = f"{SITUATION_HEADING}{said}The player says: {line}"
    prompt = Prompt(static_prefix=PERSONAS[npc], dynamic_suffix="", manifest="", context_keys=(), player_turn=turn)
    return GenerationRequest(npc_id=npc, prompt=prompt, seed=seed, max_tokens=24, output_schema=SHORT)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_model(embedded_model_path(), tmp_path_factory.mktemp("gpu") / "small.gguf")


def _backend(model: Path | None, device: str, **settings: object) -> LlamaCppBackend:
    layers = 0 if device == "cpu" else -1
    config = {"n_ctx": 1024, "kv_budget_mib": 32, "n_threads": 2, **settings}
    return LlamaCppBackend(
        LlamaCppConfig(model_path=str(model) if model else None, device=device, n_gpu_layers=layers, **config)  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def gpu_backend(small_model: Path) -> Iterator[LlamaCppBackend]:
    backend = _backend(small_model, "vulkan:0", parallel=2)
    yield backend
    backend.close()


def test_lavapipe_is_a_vulkan_device_and_bad_choices_are_refused_with_what_exists() -> None:
    devices = {d.spec: d for d in available_devices()}
    assert devices["vulkan:0"].kind in ("gpu", "igpu") and devices["vulkan:0"].memory_total_mib > 0
    assert devices["cpu"].kind == "cpu"
    assert choose_device("vulkan:0", None).gpu_layers == -1  # naming a GPU offloads every layer
    assert choose_device("auto", -1).spec == "vulkan:0"
    with pytest.raises(DeviceError, match=r"--device vulkan:7: no such device; this build offers vulkan:0 \(.*\), cpu"):
        choose_device("vulkan:7", None)
    with pytest.raises(DeviceError, match="too small"):
        _backend(None, "vulkan:0", kv_budget_mib=1 << 20)


def test_device_gpu_falls_back_to_the_cpu_when_the_gpu_cannot_hold_the_model(small_model: Path) -> None:
    """`gpu` is what a shipped game asks for: a player's GPU too small for the KV budget is not
    an error, the model runs on the CPU and says why; naming the device instead is refused."""
    backend = _backend(small_model, "gpu", kv_budget_mib=4096)
    try:
        extra = backend.fingerprint().extra
        assert extra["device"] == "cpu" and extra["offloaded_layers"] == 0
        assert "vulkan:0" in str(extra["device_fallback"]) and "too small" in str(extra["device_fallback"])
        assert backend.generate(_request("guard", "Who goes there?")).finish_reason == "stop"
    finally:
        backend.close()
    with pytest.raises(DeviceError, match="too small"):
        _backend(small_model, "vulkan:0", kv_budget_mib=4096)


def test_the_embedded_model_runs_every_layer_on_vulkan_and_repeats_itself_there() -> None:
    """The promise across devices: the reproducible engine gives the same text for the same
    prompt and seed on the same device and build (cached or not); Vulkan's kernels round
    differently from the CPU's, so another device may word it otherwise, and the receipt's
    fingerprint names the device (docs/gpu.md)."""
    backend = _backend(None, "vulkan:0", reproducible=True)
    try:
        extra = backend.fingerprint().extra
        assert extra["offloaded_layers"] == 31 and extra["device"] == "vulkan:0"
        assert "llvmpipe" in str(extra["device_name"])
        first = backend.generate(_request("guard", "When does the gate close?"))
        again = backend.generate(_request("guard", "When does the gate close?"))
    finally:
        backend.close()
    assert first.finish_reason == "stop" and json.loads(first.text)["dialogue"]
    assert again.tokens_cached > 0 and again.text == first.text


def test_two_npcs_at_once_share_decode_steps_on_the_gpu(small_model: Path) -> None:
    gpu_backend = _backend(small_model, "vulkan:0", parallel=2)
    engine = gpu_backend.engine
    assert engine is not None and engine.stats.peak_decoding == 0
    results: dict[str, Generation] = {}
    barrier = threading.Barrier(2)

    def ask(npc: str) -> None:
        barrier.wait()
        results[npc] = gpu_backend.generate(_request(npc, "Who goes there?"))

    threads = [threading.Thread(target=ask, args=(npc,)) for npc in ("guard", "merchant")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    peak = engine.stats.peak_decoding
    gpu_backend.close()
    assert set(results) == {"guard", "merchant"}
    for generation in results.values():
        assert generation.finish_reason == "stop"
        assert set(json.loads(generation.text)) == {"dialogue"}  # the grammar held on the GPU
    assert peak == 2


def _rotation(backend: LlamaCppBackend) -> list[tuple[int, int]]:
    """Three NPCs in turn through one generation slot and one resident sequence, then each
    again: every turn evicts another NPC's sequence to the host spill, and each repeat turn
    copies its own back. Returns (evaluated, cached) per turn."""
    turns = [("guard", ()), ("merchant", ()), ("smith", ()), ("guard", ("When does the gate close?",))]
    turns += [("merchant", ("Who goes there?",)), ("guard", ("When does the gate close?", "Who goes there?"))]
    out = []
    for npc, earlier in turns:
        g = backend.generate(_request(npc, "Who goes there?", earlier=earlier))
        assert g.finish_reason == "stop"
        out.append((g.tokens_evaluated, g.tokens_cached))
    return out


def test_shared_prefixes_and_the_host_spill_work_on_the_gpu_as_on_the_cpu(small_model: Path) -> None:
    counts = {}
    restored = {}
    for device in ("vulkan:0", "cpu"):
        backend = _backend(small_model, device, parallel=1, resident_sequences=1)
        try:
            counts[device] = _rotation(backend)
            engine = backend.engine
            assert engine is not None and engine.spill is not None
            restored[device] = engine.stats.prompt_tokens_restored
        finally:
            backend.close()
    # The same tokens evaluated and reused, turn by turn: template tokens shared into a new
    # sequence (seq_cp), repeat turns restored from the spill (a GPU state saved to the host).
    assert counts["vulkan:0"] == counts["cpu"]
    assert restored["vulkan:0"] == restored["cpu"] > 0
    repeat = counts["vulkan:0"][3]
    assert repeat[1] > repeat[0]  # the guard's second turn reused more than it evaluated


def test_a_stream_cut_on_the_gpu_stops_and_a_continuation_keeps_its_words(gpu_backend: LlamaCppBackend) -> None:
    seen: list[str] = []

    def cut_inside_the_line(text: str) -> bool:
        seen.append(text)
        return len(seen) < 4  # a few steps in (the grammar's forced runs take no step of their own)

    request = _request("merchant", "What do you sell?")
    cut = gpu_backend.generate_streaming(request, cut_inside_the_line)
    assert cut.finish_reason == "aborted" and len(seen) == 4 and cut.text.startswith(seen[-1])
    given = cut.text
    went_on = gpu_backend.generate(request.model_copy(update={"output_prefix": given}))
    assert went_on.finish_reason == "stop" and went_on.text.startswith(given)
    assert set(json.loads(went_on.text)) == {"dialogue"}


def test_a_warmed_npc_evaluates_only_its_new_message_on_the_gpu(gpu_backend: LlamaCppBackend) -> None:
    npc = "smith"
    gpu_backend.invalidate(npc)
    request = _request(npc, "Can you mend my sword?")
    warmed = gpu_backend.warm(npc, request.prompt)
    assert warmed.outcome == "warmed" and warmed.tokens_evaluated > 0
    first = gpu_backend.generate(request)
    whole = gpu_backend.tokenize_prompt(request.prompt)
    assert first.tokens_cached == warmed.tokens
    assert first.tokens_evaluated == len(whole.prefix) + len(whole.suffix) - warmed.tokens


def test_a_sidecar_launched_as_the_godot_addon_launches_it_answers_from_the_gpu(small_model: Path, tmp_path: Path) -> None:
    """`serve` with the arguments the addon adds (settings.gd, supervisor.gd): the device and
    layers, then --port, --parent-pid, --launch-token and --log-file. `hello` names the device;
    an interaction is answered (the small model's noise is refused by the gate, so a fallback
    line is the expected answer) and recorded."""
    port = free_port()
    log = tmp_path / "sidecar.log"
    command = [
        sys.executable, "-m", "loreguard.server.cli", "serve", "--model", str(small_model), "--device", "vulkan:0",
        "--kv-budget-mib", "32", "--data", str(tmp_path / "data"), "--port", str(port), "--parent-pid", str(os.getpid()),
        "--launch-token", "tok-gpu", "--log-file", str(log),
    ]  # fmt: skip
    # Output goes to the log file, as for the addon: the pipe only carries a failure to start.
    sidecar = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        hello = wait_until_ready(sidecar, port, timeout_s=300)
        assert hello.launch_token == "tok-gpu" and hello.model is not None
        assert hello.model.extra["device"] == "vulkan:0" and hello.model.extra["offloaded_layers"] == 3
        npc = load_npcs(1)[0]
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=600) as client:
            client.load_world(demo_world())
            client.register_npc(npc)
            result = client.interact(npc.id, "Who goes there?")
        assert result.dialogue and result.audit_record_id
        assert result.outcome in (InteractionOutcome.VALIDATED, InteractionOutcome.FALLBACK)
    finally:
        sidecar.terminate()
        sidecar.communicate(timeout=60)  # reaps it and closes the pipe
    assert "vulkan:0" in log.read_text()
