"""The model backend a command asked for, as a description and a loader: one factory for the
dialogue model of `serve`, `demo` and `replay --live`, and for the judge's own model.

Nothing is loaded here: `model_backend` resolves (and, with consent, downloads) a model and
returns what to load, so a command can report a bad `--model` in one line before it starts
anything. `load_with_progress` then loads it while a line counts the seconds.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from loreguard.server.inference.base import InferenceBackend

#: `--model auto`: the strongest model this machine serves in time (server/models/auto.py).
AUTO_MODEL = "auto"
#: `--model embedded`: the SmolLM2-135M inside the package, by name.
EMBEDDED_MODEL = "embedded"

#: A description of the backend ("llama-3.2-3b", "remote model at …") and a function loading it.
BackendLoader = tuple[str, Callable[[], InferenceBackend]]


@dataclass(frozen=True)
class BackendChoice:
    """Which backend to load, with what settings (the command line's `--backend`, `--model`...)."""

    kind: Literal["llama", "openai", "scripted"] = "llama"
    #: llama: a GGUF path, a catalogue name, hf:REPO/FILE or `auto`; None: the embedded model.
    model: str | None = None
    #: llama: download a model that is not installed without asking.
    assume_yes: bool = False
    memory_budget_mib: int | None = None
    #: llama: layers to offload (None: all on a named GPU, none on `auto`) and where (devices.py).
    gpu_layers: int | None = None
    device: str = "auto"
    reproducible: bool = False
    parallel: int | None = None
    kv_budget_mib: int | None = None
    #: llama: where NPCs' evaluated prompts are kept across launches, and its cap (None: nowhere).
    prompt_cache_dir: str | None = None
    prompt_cache_mib: int = 1024
    #: llama: the sidecar was launched by a game, which tails its log and cannot answer a
    #: question: download progress a line per percent, and no prompt (only --yes downloads).
    for_game: bool = False
    #: openai: the server's URL, how long one request may take (None: the backend's default),
    #: and the served model's chat template for raw completions (a built-in name, a GGUF
    #: file or catalogue name to read it from, `embedded`; None: the server's own or none).
    base_url: str = "http://127.0.0.1:8080"
    timeout_s: float | None = None
    chat_template: str | None = None
    #: scripted: a JSON file with a list of model outputs, played in a loop, each taking this long.
    script: str | None = None
    script_latency_ms: int = 0


def model_backend(choice: BackendChoice) -> BackendLoader:
    """What `choice` loads, and a function that loads it. Raises `ModelError` (a bad or missing
    model), `DeviceError` (a device this build lacks) and `SystemExit` (a scripted backend
    without a script) before anything loads."""
    if choice.kind == "scripted":
        from loreguard.server.inference import ScriptedBackend

        if not choice.script:
            raise SystemExit("--backend scripted needs --script FILE (a JSON list of model outputs)")
        outputs = json.loads(Path(choice.script).read_text())
        latency_s = choice.script_latency_ms / 1000
        return f"scripted outputs from {choice.script}", lambda: ScriptedBackend(outputs, cycle=True, latency_s=latency_s)
    if choice.kind == "openai":
        from loreguard.server.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig

        settings: dict[str, object] = {} if choice.timeout_s is None else {"timeout_s": choice.timeout_s}
        if choice.chat_template:
            settings |= _chat_template(choice.chat_template)
        remote = OpenAICompatibleConfig(base_url=choice.base_url, model=choice.model, slots=choice.parallel or 0, **settings)
        return f"remote model at {choice.base_url}", lambda: OpenAICompatibleBackend(remote)
    from loreguard.server.inference.devices import choose_device
    from loreguard.server.inference.llama_backend import LlamaCppBackend
    from loreguard.server.inference.llama_config import LlamaCppConfig
    from loreguard.server.models.resolve import choose_model, warn_guesses

    # A device this build lacks is refused before a model is chosen, let alone downloaded.
    placement = choose_device(choice.device, choice.gpu_layers)
    model = None if choice.model == EMBEDDED_MODEL else choice.model
    if model == AUTO_MODEL:
        model = _auto_model(choice, on_gpu=placement.gpu_layers != 0)
    # A path, a catalogue name or hf:REPO/FILE; checked (and pulled, with consent) before loading.
    resolved = choose_model(
        model,
        assume_yes=choice.assume_yes,
        memory_budget_mib=choice.memory_budget_mib,
        kv_budget_mib=choice.kv_budget_mib,
        progress_step_pct=1 if choice.for_game else 10,
        stdin=io.StringIO() if choice.for_game else None,
    )
    warn_guesses(resolved, sys.stderr)
    local = LlamaCppConfig(
        model_path=str(resolved.path),
        n_gpu_layers=placement.gpu_layers,
        device=choice.device,
        reproducible=choice.reproducible,
        parallel=choice.parallel,
        kv_budget_mib=choice.kv_budget_mib,
        prompt_cache_dir=choice.prompt_cache_dir,
        prompt_cache_mib=choice.prompt_cache_mib,
        **resolved.settings,  # the catalogue's per-model settings
    )
    what = resolved.entry.name if resolved.entry else resolved.path.name
    return what, lambda: LlamaCppBackend(local)


def _auto_model(choice: BackendChoice, *, on_gpu: bool) -> str | None:
    """`--model auto`: the strongest model that answers in time here (server/models/auto.py),
    said in one line on stderr. A download is allowed where a named model's would be: with --yes,
    or asked at a terminal (never for a game, which cannot answer)."""
    from loreguard.server.models.auto import pick_model
    from loreguard.server.models.catalogue import load_catalogue
    from loreguard.server.models.pull import offline
    from loreguard.server.models.resolve import is_installed

    installed = frozenset(e.name for e in load_catalogue().models if e.first_words is not None and is_installed(e))
    may_download = not offline() and (choice.assume_yes or (not choice.for_game and sys.stdin.isatty()))
    pick = pick_model(on_gpu=on_gpu, installed=installed, may_download=may_download)
    print(pick.reason, file=sys.stderr, flush=True)
    return pick.model


def _chat_template(name: str) -> dict[str, object]:
    """`chat_template`, `bos_token` and `eos_token` for `--chat-template NAME`: a built-in
    template, or the template in a GGUF file (a path, a catalogue name, `embedded`)."""
    from loreguard.server.inference.chat_template import BUILTIN_TEMPLATES
    from loreguard.server.inference.gguf_header import NotGGUF, read_header

    if name in BUILTIN_TEMPLATES:
        return {"chat_template": name}
    from loreguard.server.models.resolve import choose_model

    path = choose_model(None if name == "embedded" else name, assume_yes=False, stdin=io.StringIO()).path
    try:
        header = read_header(path)
    except (OSError, NotGGUF) as exc:
        raise SystemExit(f"--chat-template {name}: cannot read {path}: {exc}") from exc
    template = header.chat_template
    if not template:
        raise SystemExit(f"--chat-template {name}: {path.name} has no chat template; name a built-in one (chatml, gemma)")
    return {
        "chat_template": template, "bos_token": header.token("tokenizer.ggml.bos_token_id") or "",
        "eos_token": header.token("tokenizer.ggml.eos_token_id") or "",
    }  # fmt: skip


def load_with_progress(what: str, load: Callable[[], InferenceBackend], out: TextIO) -> InferenceBackend:
    """Run `load()` while a line on `out` counts the seconds."""
    done = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not done.wait(0.25):
            print(f"\rloading {what} ... {time.monotonic() - started:4.1f} s", end="", file=out, flush=True)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    backend = None
    try:
        backend = load()
        return backend
    finally:
        done.set()
        ticker.join()
        seconds = time.monotonic() - started
        if backend is not None:
            print(f"\rloaded {what}{_placement(backend)} in {seconds:.1f} s      ", file=out, flush=True)
        else:  # the error itself follows, from whoever catches it
            print(f"\rcould not load {what} ({seconds:.1f} s)      ", file=out, flush=True)


def _placement(backend: InferenceBackend) -> str:
    """ " on vulkan:0 (NVIDIA ..., 29 layers)" or " on the CPU" for a local model, what a remote
    server is and serves at once, "" otherwise."""
    extra = backend.fingerprint().extra
    if "base_url" in extra and "engine" in extra:
        retries = "retries continue the words shown" if extra.get("continues_output") else "retries start over"
        return f" ({extra['engine']}, {extra['slots']} at once, {extra['structured_output']} output, {retries})"
    if "device" not in extra:
        return ""
    if extra["device"] == "cpu":
        return f" on the CPU, because {extra['device_fallback']}" if extra.get("device_fallback") else " on the CPU"
    return f" on {extra['device']} ({extra['device_name']}, {extra['offloaded_layers']} layers)"
