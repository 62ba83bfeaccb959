"""The in-process llama.cpp backend with the real embedded model, through the real pipeline."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from model_helpers import Recording, demo_store
from pipeline_helpers import ask

from loreguard.schemas import AddCanonicalFact, Authority, MemoryWrite, ParsedOutput
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import ParsePath
from loreguard.server.inference import BackendError
from loreguard.server.inference.grammar import compile_schema
from loreguard.server.inference.llama_backend import LlamaCppBackend, LlamaCppConfig
from loreguard.server.inference.llama_native import supports_gpu_offload
from loreguard.server.inference.model_files import ModelNotFound, embedded_model_path
from loreguard.server.inference.sampling import SAMPLER
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.retry import RetryPolicy

pytestmark = pytest.mark.model

LINES = [
    ("guard", "Hello there. Who are you?"),
    ("merchant", "What do you have for sale?"),
    ("guard", "Can you open the gate for me?"),
    ("merchant", "How much for a rope?"),
    ("guard", "What is the password?"),
    ("merchant", "Have you heard any news?"),
    ("guard", "When does the gate close?"),
    ("merchant", "Can you give me a torch?"),
    ("guard", "Is there a dragon in the hills?"),
    ("merchant", "Thank you, goodbye."),
]


def _request_for(llama_backend: LlamaCppBackend, tmp_path: Path, npc: str, line: str):
    """The first dialogue request the pipeline sends for this line."""
    recording = Recording(llama_backend)
    GovernancePipeline(demo_store(tmp_path / f"{npc}.sqlite"), recording).interact(ask(line, npc=npc))
    return recording.calls[0][0]


@pytest.mark.slow
def test_fifty_interactions_are_schema_valid_and_never_truncated(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    recording = Recording(llama_backend)
    store = demo_store(tmp_path / "memory.sqlite")
    # One attempt each: fifty generations, whatever the gate makes of them (a retry is decoded
    # under the same grammar; with three attempts the test took 7 minutes on a loaded 2-core CI)
    pipeline = GovernancePipeline(store, recording, PipelineConfig(retry=RetryPolicy(max_attempts=1)))
    results = [pipeline.interact(ask(line, npc=npc)) for _ in range(5) for npc, line in LINES]

    assert len(results) == len(recording.calls) == 50
    assert all(r.dialogue for r in results)
    for request, generation in recording.calls:
        assert generation.finish_reason == "stop", generation.text
        assert generation.tokens_generated <= compile_schema(request.output_schema).max_tokens
        ParsedOutput.model_validate_json(generation.text)  # strict JSON, every field in bounds
    # The receipts say which outputs the gate accepted; the model was never the authority.
    assert store.interactions("guard") + store.interactions("merchant") == 50


def test_kv_reuse_survives_another_npcs_turn(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    llama_backend = reproducible_backend
    guard = _request_for(llama_backend, tmp_path, "guard", "Good evening.")
    merchant = _request_for(llama_backend, tmp_path, "merchant", "Good evening.")
    tokens = llama_backend.tokenize_prompt(guard.prompt)

    llama_backend.generate(guard)
    llama_backend.generate(merchant)  # the KV cache now holds the merchant
    again = llama_backend.generate(guard)

    assert again.tokens_evaluated == len(tokens.suffix)
    assert again.tokens_cached == len(tokens.prefix)
    assert len(tokens.prefix) > 3 * len(tokens.suffix)


def test_same_seed_same_text_cached_or_not_and_in_another_process(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    llama_backend = reproducible_backend
    guard = _request_for(llama_backend, tmp_path, "guard", "Tell me about the town.")
    merchant = _request_for(llama_backend, tmp_path, "merchant", "Tell me about the town.")

    llama_backend.invalidate("guard")
    cold = llama_backend.generate(guard)
    llama_backend.generate(merchant)
    warm = llama_backend.generate(guard)
    assert (cold.tokens_cached, warm.tokens_cached > 0) == (0, True)
    assert warm.text == cold.text

    request_file = tmp_path / "request.json"
    request_file.write_text(guard.model_dump_json())
    script = (
        "import sys\n"
        "from loreguard.server.inference.base import GenerationRequest\n"
        "from loreguard.server.inference.llama_backend import LlamaCppBackend, LlamaCppConfig\n"
        "request = GenerationRequest.model_validate_json(open(sys.argv[1]).read())\n"
        f"backend = LlamaCppBackend(LlamaCppConfig(n_threads={llama_backend.n_threads}, reproducible=True))\n"
        "sys.stdout.write(backend.generate(request).text)\n"
    )
    other = subprocess.run([sys.executable, "-c", script, str(request_file)], capture_output=True, text=True, timeout=300)
    assert other.returncode == 0, other.stderr[-2000:]
    assert other.stdout == cold.text


def test_different_seeds_are_recorded_per_interaction(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    recording = Recording(llama_backend)
    pipeline = GovernancePipeline(demo_store(tmp_path / "m.sqlite"), recording)
    first = pipeline.interact(ask("Hello.", npc="guard"))
    second = pipeline.interact(ask("Hello.", npc="guard"))
    assert first.receipt.seed != second.receipt.seed
    assert [r.seed for r, _ in recording.calls][0] == first.receipt.seed


def test_a_profile_change_invalidates_that_npc_only(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    llama_backend = reproducible_backend
    recording = Recording(llama_backend)
    store = demo_store(tmp_path / "m.sqlite")
    pipeline = GovernancePipeline(store, recording)
    pipeline.interact(ask("Hi.", npc="guard"))
    pipeline.interact(ask("Hi.", npc="merchant"))
    invalidations = llama_backend.prefix_cache.stats.invalidations

    new_fact = AddCanonicalFact(scope="guard", fact={"id": "new_captain", "text": "The new captain is Hilde."})
    assert store.apply([MemoryWrite(source=Authority.DESIGNER, op=new_fact)]).committed
    recording.calls.clear()
    pipeline.interact(ask("Hi again.", npc="guard"))
    pipeline.interact(ask("Hi again.", npc="merchant"))

    guard_calls = [g for r, g in recording.calls if r.npc_id == "guard"]
    merchant_calls = [g for r, g in recording.calls if r.npc_id == "merchant"]
    assert guard_calls[0].tokens_cached == 0  # the guard's prefix changed: evaluated again
    assert all(g.tokens_cached > 0 for g in merchant_calls)  # the merchant's is untouched
    assert llama_backend.prefix_cache.stats.invalidations == invalidations + 1


@pytest.mark.parametrize("engine", ["llama_backend", "reproducible_backend"])
def test_a_prompt_beyond_the_context_is_a_typed_error_and_changes_nothing(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    llama_backend: LlamaCppBackend = request.getfixturevalue(engine)
    asked = _request_for(llama_backend, tmp_path, "guard", "Hello.")
    huge = Prompt(static_prefix="lore " * 20000, dynamic_suffix="Player: hi\nYou:", manifest="", context_keys=())
    cached_before = llama_backend.prefix_cache.cached_npcs(), llama_backend.resident_prefixes, llama_backend.stats.generations
    with pytest.raises(BackendError, match="n_ctx"):
        llama_backend.generate(asked.model_copy(update={"prompt": huge}))
    assert (
        llama_backend.prefix_cache.cached_npcs(),
        llama_backend.resident_prefixes,
        llama_backend.stats.generations,
    ) == cached_before
    assert llama_backend.generate(asked).finish_reason == "stop"


@pytest.mark.parametrize("engine", ["llama_backend", "reproducible_backend"])
def test_a_sampler_the_native_side_refuses_is_a_backend_error(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever engine runs it, a native failure while the request is prepared (tokens, grammar,
    sampler) reaches the pipeline as a `BackendError` (a fallback), and the backend serves on."""
    from loreguard.server.inference import llama_backend as module
    from loreguard.server.inference.llama_native import NativeError

    llama_backend: LlamaCppBackend = request.getfixturevalue(engine)
    asked = _request_for(llama_backend, tmp_path, "guard", "Hello.")

    def refused(*args: object, **kwargs: object) -> None:
        raise NativeError("the grammar did not parse")

    with monkeypatch.context() as patch:
        patch.setattr(module, "TokenSampler", refused)
        with pytest.raises(BackendError, match="grammar did not parse"):
            llama_backend.generate(asked)
    assert llama_backend.generate(asked).finish_reason == "stop"


def test_fingerprint_identifies_the_file_and_reports_offload(llama_backend: LlamaCppBackend) -> None:
    fingerprint = llama_backend.fingerprint()
    path = embedded_model_path()
    with path.open("rb") as f:
        assert fingerprint.header_sha256 == hashlib.sha256(f.read(1 << 20)).hexdigest()
    assert (fingerprint.file_name, fingerprint.size_bytes) == (path.name, path.stat().st_size)
    assert fingerprint.quantization == "Q4_1" and fingerprint.n_ctx == llama_backend.config.n_ctx
    assert fingerprint.extra["gpu_offload_supported"] is supports_gpu_offload()
    # which sampler wrote the text: a live replay by another may write other words from the seed
    assert fingerprint.extra["sampler"] == SAMPLER and fingerprint.extra["llguidance"]
    if not supports_gpu_offload():
        assert fingerprint.extra["offloaded_layers"] == 0
    json.dumps(fingerprint.model_dump(mode="json"))  # goes into audit records as is


def test_a_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="no model file"):
        LlamaCppBackend(LlamaCppConfig(model_path=str(tmp_path / "nope.gguf")))


def test_default_threads_leave_a_core_for_the_game() -> None:
    from loreguard.server.inference.llama_backend import default_threads

    assert default_threads() == max(1, (os.cpu_count() or 2) - 1)
    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"


def test_the_model_names_its_special_tokens_and_the_receipt_its_sampler(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    specials = llama_backend.special_tokens()
    # asked of the vocabulary, not written down: SmolLM2's chat template tokens are among them
    assert {"<|im_start|>", "<|im_end|>"} <= set(specials) and list(specials) == sorted(specials)
    sampling = llama_backend.sampling()
    assert sampling["repeat_penalty"] > 1.0 and sampling["dry_multiplier"] > 0.0  # on by default
    result = GovernancePipeline(demo_store(tmp_path / "s.sqlite"), llama_backend).interact(ask("Hello there.", npc="guard"))
    assert result.receipt.sampling == sampling and result.receipt.seed is not None
    # the grammar still holds with penalties and DRY in the chain: the JSON parses strictly
    assert result.receipt.attempts[0].parse_path is ParsePath.STRICT


@pytest.mark.parametrize("engine", ["llama_backend", "reproducible_backend"])
def test_an_output_given_its_start_continues_it_under_the_grammar(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`output_prefix` (a streamed retry keeping the words already shown): the model goes on
    from the given start, the output holds it and is still one the schema allows; a start the
    grammar refuses is a typed error that leaves the backend working."""
    llama_backend: LlamaCppBackend = request.getfixturevalue(engine)
    asked = _request_for(llama_backend, tmp_path, "guard", "Hello there. Who are you?")
    given = asked.model_copy(update={"output_prefix": '{"dialogue": "Well met, stranger.'})
    seen: list[str] = []
    generation = llama_backend.generate_streaming(given, lambda text: seen.append(text) or True)
    assert generation.text.startswith('{"dialogue": "Well met, stranger.') and seen[0].startswith(given.output_prefix)
    parsed = ParsedOutput.model_validate(json.loads(generation.text))
    assert parsed.dialogue.startswith("Well met, stranger.") and generation.finish_reason == "stop"
    assert 0 < generation.tokens_generated
    if engine == "reproducible_backend":
        assert llama_backend.generate(given).text == generation.text  # a function of prompt, start and seed
    # Told not to begin the way it just did, it begins otherwise.
    went_on = generation.text[len(given.output_prefix) :]
    avoided = llama_backend.generate(given.model_copy(update={"avoid_start": went_on}))
    first = llama_backend.native_model.tokenize(went_on, add_special=False)[0]
    other = llama_backend.native_model.tokenize(avoided.text[len(given.output_prefix) :], add_special=False)
    assert avoided.text.startswith(given.output_prefix) and other[0] != first
    with pytest.raises(BackendError, match="grammar refuses"):
        llama_backend.generate(asked.model_copy(update={"output_prefix": '{"emotion": "happy"'}))
    assert json.loads(llama_backend.generate(asked).text)["dialogue"]


def test_a_decode_in_progress_is_seen_from_another_thread(llama_backend: LlamaCppBackend, tmp_path: Path) -> None:
    """`stalled_s` reads how long the running llama.cpp call has taken, from the thread that
    watches for a hung GPU driver (server/sidecar/watchdog.py), and is 0.0 between calls."""
    import threading

    from waiting import wait_for

    asked = _request_for(llama_backend, tmp_path, "guard", "Hello.")
    long_prompt = asked.prompt.model_copy(update={"static_prefix": asked.prompt.static_prefix + " The road is long." * 400})
    seen: list[float] = []
    # A long prompt's prefill is the long call; one token of output is enough after it.
    request = asked.model_copy(update={"prompt": long_prompt, "output_schema": None, "max_tokens": 1})
    worker = threading.Thread(target=lambda: llama_backend.generate(request))
    worker.start()
    wait_for(lambda: seen.append(llama_backend.stalled_s()) or seen[-1] > 0, "a decode to be seen running")
    worker.join(timeout=600)
    assert llama_backend.stalled_s() == 0.0


def _longest_shared_run(a: list[str], b: list[str]) -> int:
    """The most words in a row that `a` and `b` share."""
    best = 0
    for i in range(len(a)):
        for j in range(len(b)):
            k = 0
            while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
                k += 1
            best = max(best, k)
    return best


def test_a_line_the_npc_said_before_is_not_written_again(reproducible_backend: LlamaCppBackend, tmp_path: Path) -> None:
    """`said_before`: DRY counts the NPC's earlier lines as words already written, so the same
    prompt and seed no longer give the same long line (llama.cpp's DRY on its own sees only the
    reply, and a model copies its own last answer from the conversation)."""
    asked = _request_for(reproducible_backend, tmp_path, "guard", "Hello there. Who are you?")
    first = json.loads(reproducible_backend.generate(asked).text)["dialogue"]
    assert len(first.split()) >= 4, first  # long enough that a copy would be a run DRY punishes
    again = json.loads(reproducible_backend.generate(asked).text)["dialogue"]
    assert again == first  # without it, the same line: a function of prompt and seed
    told = json.loads(reproducible_backend.generate(asked.model_copy(update={"said_before": (first,)})).text)["dialogue"]
    assert _longest_shared_run(told.split(), first.split()) < len(first.split()), (first, told)
    # Every line it was told is said before; an unrelated one leaves the reply as it was.
    unrelated = asked.model_copy(update={"said_before": ("Bread, rope and lanterns!",)})
    assert json.loads(reproducible_backend.generate(unrelated).text)["dialogue"] == first
