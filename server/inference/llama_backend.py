"""In-process llama.cpp inference with prompt-prefix reuse and bounded constrained decoding.

The backend renders the prompt with the model's chat template, tokenizes it (static prefix and
the rest apart, so the prefix is cacheable), compiles the output schema's grammar and builds the
request's seeded sampler; one of two engines then runs the tokens (`engine.Engine`):

* **batched** (the default, `batch_engine` behind `batch_adapter`): one context with `parallel`
  slots, continuously batched; a prompt reuses the longest token prefix any resident sequence
  holds, so a repeat turn evaluates only what changed. Many NPCs talk at once.
* **reproducible** (`reproducible_engine`): one generation at a time, numerics independent of
  anything else. Used for tests and live replay, where the same prompt and seed must give the
  same text in any process.

Warm-ups (`warm`) put an NPC's prompt, up to its new message, in the cache before its first turn,
in idle time, giving way to any generation between chunks of prefill.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

from loreguard.schemas.prompt import NEW_MESSAGE_HEADINGS, Prompt
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.inference import devices
from loreguard.server.inference.base import (
    BackendError,
    Generation,
    GenerationRequest,
    InferenceBackend,
    Observer,
    WarmResult,
)
from loreguard.server.inference.batch_adapter import BatchedEngineAdapter
from loreguard.server.inference.batch_engine import BatchedEngine
from loreguard.server.inference.chat_template import ChatTemplate, TemplateError
from loreguard.server.inference.dialogue_guard import DialogueGuard
from loreguard.server.inference.engine import Engine, EngineOutput, EngineRequest, PromptTokens
from loreguard.server.inference.grammar import CompiledGrammar, UnsupportedSchema, compile_schema
from loreguard.server.inference.llama_config import LlamaCppConfig, default_threads
from loreguard.server.inference.llama_fingerprint import llama_fingerprint
from loreguard.server.inference.llama_native import (
    NativeContext,
    NativeError,
    NativeModel,
    sequence_limit,
)
from loreguard.server.inference.model_files import resolve_model_path
from loreguard.server.inference.prefix_cache import PrefixCache
from loreguard.server.inference.prompt_states import PromptStateStore, open_prompt_states
from loreguard.server.inference.reproducible_engine import ReproducibleEngine
from loreguard.server.inference.sampling import SamplingParams, TokenSampler
from loreguard.server.inference.sequences import SequencePool, common_prefix
from loreguard.server.inference.spill import SpillCache
from loreguard.server.inference.token_masks import MaskVocabulary

#: Stands for the new message when a warm-up renders the prompt before it (never in a prompt:
#: player text is cleaned of control characters).
_NEW_MESSAGE = "\x00new message\x00"


@dataclass
class BackendStats:
    generations: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_tokens_reused: int = 0
    tokens_generated: int = 0
    #: Of those generated, the ones the grammar forced (no step of their own), and the model
    #: calls generations took (prompt chunks and output steps).
    tokens_forced: int = 0
    decode_calls: int = 0
    grammar_full_filters: int = 0
    #: Reproducible engine: prefix tokens warm-ups evaluated (the batched engine counts its own).
    warm_tokens_evaluated: int = 0


def _host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


class LlamaCppBackend(InferenceBackend):
    name = "llama.cpp"

    def __init__(self, config: LlamaCppConfig | None = None) -> None:
        self.config = config or LlamaCppConfig()
        self.model_path = resolve_model_path(self.config.model_path)
        self.n_threads = self.config.n_threads or default_threads()
        #: Saved prefixes of the reproducible engine (the batched engine keeps its own).
        self.prefix_cache = PrefixCache(self.config.prefix_cache_bytes)
        #: The device the model runs on and the layers offloaded to it (DeviceError if none fits).
        self.device = devices.choose_device(self.config.device, self.config.n_gpu_layers)
        #: Why `--device gpu` ran on the CPU after all (a GPU too small, a driver that refused), or "".
        self.device_fallback = ""
        try:
            ctx = self._load()
        except (devices.DeviceError, BackendError) as exc:
            if self.config.device.strip().lower() != "gpu" or self.device.device is None:
                raise
            # `gpu` promises the CPU when the GPU cannot serve: a player's machine, not an error.
            self.device_fallback = f"{self.device.device.describe()} could not run the model ({exc})"
            self.device = devices.DeviceChoice(device=None, gpu_layers=0)
            ctx = self._load()
        self._context = ctx
        #: The longest prompt plus output one generation may take.
        self.max_sequence_tokens = sequence_limit(self.config.n_ctx, ctx)
        self.metadata = self._model.metadata()
        bos = self._model.bos_token
        #: The BOS token's text, which some chat templates write themselves.
        self.bos_text = self._model.token_text(bos) if bos >= 0 else ""
        self.template = self._load_template()
        self.stats = BackendStats()
        self._stats_lock = threading.Lock()
        c = self.config
        self._sampling = SamplingParams(
            c.temperature,
            c.top_k,
            c.top_p,
            repeat_last_n=c.repeat_last_n,
            repeat_penalty=c.repeat_penalty,
            frequency_penalty=c.frequency_penalty,
            presence_penalty=c.presence_penalty,
            dry_multiplier=c.dry_multiplier,
            dry_base=c.dry_base,
            dry_allowed_length=c.dry_allowed_length,
            dry_last_n=c.dry_last_n,
        )
        self._special_tokens = self._model.special_token_texts()
        self._closed = False
        self._model.stop_tokens = self._stop_token_ids()
        #: The vocabulary as the sampler's grammar masks read it (built once: ~1 s at 150k tokens).
        self.vocabulary = MaskVocabulary(self._model)
        extra = {"offloaded_layers": self.offloaded_layers, "device_fallback": self.device_fallback,
                 "engine": "reproducible" if self.config.reproducible else "batched",
                 "chat_template_sha256": hashlib.sha256(self.template.source.encode()).hexdigest()}  # fmt: skip
        n_ctx = self.max_sequence_tokens
        self._fingerprint = llama_fingerprint(self._model, self.model_path, n_ctx=n_ctx, device=self.device, extra=extra)
        #: `LlamaCppConfig.fast_forward`, switchable between generations (`bench fast-forward`);
        #: off on lavapipe, whose Mesa 22 crashes on the batch shapes forced runs make (docs/gpu.md).
        self.fast_forward = self.config.fast_forward and not devices.is_software_vulkan(self.device)

    def _load(self) -> NativeContext:
        """Load the model on `self.device` and make the engine; the engine's context."""
        self._check_device_fits()
        try:
            self._model = NativeModel(
                str(self.model_path), n_gpu_layers=self.device.gpu_layers, devices=devices.device_array(self.device)
            )
            self._engine, ctx = self._make_engine()
        except NativeError as exc:
            if getattr(self, "_model", None) is not None:
                self._model.close()
                del self._model
            where = self.device.device.describe() if self.device.device else "the CPU"
            raise BackendError(f"{exc} (on {where})") from exc
        return ctx

    def _make_engine(self) -> tuple[Engine, NativeContext]:
        """The configured engine and the context it runs on."""
        if self.config.reproducible:
            ctx = NativeContext(self._model, n_ctx=self.config.n_ctx, n_batch=self.config.n_batch, n_threads=self.n_threads)
            return ReproducibleEngine(self._model, ctx, self.prefix_cache, self._prompt_states(ctx)), ctx
        ctx = self._batched_context()
        pool = SequencePool(ctx.n_seq_max, self.parallel)
        spill = SpillCache(self.config.prefix_cache_bytes) if self.config.prefix_cache_bytes else None
        disk = self._prompt_states(ctx)
        batched = BatchedEngine(self._model, ctx, pool, prefill_chunk=self.config.prefill_chunk, spill=spill, disk=disk)
        return BatchedEngineAdapter(batched, self.parallel), ctx

    def _prompt_states(self, ctx: NativeContext) -> PromptStateStore | None:
        """The disk tier of evaluated prompts (`prompt_states`), where the config sets a folder or
        the game ships files beside the model."""
        c = self.config
        shipped = tuple(Path(p) for p in c.shipped_prompts)
        device = f"{self.device.spec} layers={self.device.gpu_layers}"
        return open_prompt_states(c.prompt_cache_dir, c.prompt_cache_mib, shipped, self.model_path, ctx, device)

    @property
    def parallel(self) -> int:
        """Generation slots of the batched engine (the setting, or its default for the device)."""
        if self.config.parallel is not None:
            return self.config.parallel
        return 8 if self.offloaded_layers else 1

    @property
    def kv_budget_mib(self) -> int:
        """The setting; else 2048 MiB with a GPU and 512 on the CPU, or what one generation of
        n_ctx tokens needs where that is more (a larger model at the same context)."""
        return self._kv_budget_mib(self._model.kv_bytes_per_token, offloaded=bool(self.offloaded_layers))

    def _kv_budget_mib(self, per_token: int, *, offloaded: bool) -> int:
        if self.config.kv_budget_mib is not None:
            return self.config.kv_budget_mib
        one_generation = -(-self.config.n_ctx * per_token // 2**20)
        return max(2048 if offloaded else 512, one_generation)

    def _check_device_fits(self) -> None:
        """Refuse a GPU too small for the offloaded weights and their KV cache, from the file's
        header, before llama.cpp allocates anything (DeviceError, with the numbers)."""
        shape = devices.kv_shape(self.model_path)
        if self.device.device is None or self.device.gpu_layers == 0 or shape is None:
            return
        n_layer, per_token = shape
        budget = self._kv_budget_mib(per_token, offloaded=True) << 20
        kv_bytes = self.config.n_ctx * per_token if self.config.reproducible else budget
        devices.check_fits(self.device, weights_bytes=self.model_path.stat().st_size, n_layer=n_layer, kv_bytes=kv_bytes)

    def _batched_context(self) -> NativeContext:
        """The batched engine's context: KV cells from the memory budget, refused up front when
        the budget cannot hold one generation or exceeds this machine's memory."""
        budget = self.kv_budget_mib << 20
        per_token = self._model.kv_bytes_per_token
        cells = budget // per_token // 256 * 256
        if cells < self.config.n_ctx:
            raise NativeError(
                f"a KV budget of {self.kv_budget_mib} MiB holds {cells} tokens of this model "
                f"({per_token} bytes each), fewer than one generation's n_ctx={self.config.n_ctx}: "
                f"raise kv_budget_mib to at least {-(-self.config.n_ctx * per_token // 2**20)} or lower n_ctx"
            )
        host = _host_memory_bytes()
        if not self.offloaded_layers and host is not None and budget > host // 2:
            raise NativeError(
                f"a KV budget of {self.kv_budget_mib} MiB is more than half of this machine's "
                f"{host >> 20} MiB of memory: lower kv_budget_mib"
            )
        n_seq = self.parallel + self.config.resident_sequences
        return NativeContext(self._model, n_ctx=cells, n_batch=self.config.n_batch, n_threads=self.n_threads, n_seq_max=n_seq)

    def _stop_token_ids(self) -> frozenset[int]:
        ids = set()
        for text in self.config.stop_tokens:
            tokens = self._model.tokenize(text, add_special=False)
            if len(tokens) != 1:
                self.close()
                raise BackendError(f"stop token {text!r} is not one token of {self.model_path.name}'s vocabulary")
            ids.add(tokens[0])
        return frozenset(ids)

    def _load_template(self) -> ChatTemplate:
        source = self.config.chat_template or self.metadata.get("tokenizer.chat_template")
        if not source:
            raise BackendError(f"{self.model_path.name} has no chat template; pass one (chat_template='chatml' or 'gemma')")
        eos = self._model.token_text(self._model.eos_token) if self._model.eos_token >= 0 else ""
        return ChatTemplate(source, bos_token=self.bos_text, eos_token=eos)

    @property
    def offloaded_layers(self) -> int:
        """Layers running on the GPU: 0 on a CPU-only build."""
        if self.device.device is None or self.device.gpu_layers == 0:
            return 0
        n_layer = self._model.n_layer + 1  # llama.cpp counts the output layer too
        return n_layer if self.device.gpu_layers < 0 else min(self.device.gpu_layers, n_layer)

    def fingerprint(self) -> ModelFingerprint:
        return self._fingerprint

    def stalled_s(self) -> float:
        return self._context.stalled_s()

    def special_tokens(self) -> tuple[str, ...]:
        return self._special_tokens

    def sampling(self) -> dict[str, float | int]:
        return self._sampling.describe()

    def tokenize_prompt(self, prompt: Prompt) -> PromptTokens:
        """The prompt in the model's template, as prefix and suffix token ids.

        The two halves are tokenized separately so that the prefix tokens never depend on the
        suffix: that is what makes the prefix cacheable.
        """
        try:
            split = self.template.render(prompt.messages())
        except TemplateError as exc:
            raise BackendError(str(exc)) from exc
        return PromptTokens(
            prefix=self._tokenize_prefix(split.prefix), suffix=self._model.tokenize(split.suffix, add_special=False)
        )

    def _tokenize_prefix(self, prefix_text: str) -> list[int]:
        bos_text = self.bos_text
        if self._model.adds_bos and bos_text and prefix_text.startswith(bos_text):
            prefix_text = prefix_text[len(bos_text) :]
        return self._model.tokenize(prefix_text, add_special=True)

    def warm_tokens(self, prompt: Prompt) -> PromptTokens:
        """The tokens every prompt of this NPC starts with until its new message: the prefix,
        and as suffix the rendered text before the new message, less any token at its end that
        the new message's first characters could merge into (a new message always opens with
        one of `NEW_MESSAGE_HEADINGS`, so only tokens all of them leave alone are kept)."""
        try:
            split = self.template.render(prompt.model_copy(update={"player_turn": _NEW_MESSAGE}).messages())
        except TemplateError as exc:
            raise BackendError(str(exc)) from exc
        at = split.suffix.rfind(_NEW_MESSAGE)
        if at < 0:
            raise BackendError("the chat template does not render the new message verbatim")
        head = split.suffix[:at]
        probes = [array("i", self._model.tokenize(head + heading, add_special=False)) for heading in NEW_MESSAGE_HEADINGS]
        stable = min(common_prefix(probes[0], probe) for probe in probes[1:])
        return PromptTokens(prefix=self._tokenize_prefix(split.prefix), suffix=probes[0][:stable].tolist())

    def generate(self, request: GenerationRequest) -> Generation:
        """Safe from many threads: the batched engine batches them, the reproducible one queues."""
        return self._generate(request, None)

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        """`observe` runs on the caller's thread: a slow check delays only this generation's stop
        (`stops_when_told` within a token), not the other NPCs decoding in the same batch."""
        return self._generate(request, observe)

    def _generate(self, request: GenerationRequest, observe: Observer | None) -> Generation:
        if self._closed:
            raise BackendError("the backend is closed")
        started = time.perf_counter()
        try:
            tokens, grammar, max_tokens, forced = self._prepare(request)
            sampler = self._sampler(request, grammar, forced)
        except NativeError as exc:  # a tokenizer or grammar the native side refused
            raise BackendError(str(exc)) from exc
        engine_request = EngineRequest(
            npc_id=request.npc_id,
            tokens=tokens,
            forced=forced,
            output_prefix=request.output_prefix.encode(),
            sampler=sampler,
            max_tokens=max_tokens,
            started=started,
            timeout_s=request.timeout_ms / 1000 if request.timeout_ms else None,
        )
        out = self._engine.generate(engine_request, observe)
        self._count(out)
        return Generation(
            text=out.text,
            tokens_evaluated=out.tokens_evaluated,
            tokens_cached=out.tokens_cached,
            tokens_generated=out.tokens_generated,
            finish_reason=out.finish_reason,
            prevented=sampler.guard.prevented() if sampler.guard is not None else (),
            ttft_ms=out.ttft_ms,
            total_ms=out.total_ms,
        )

    def warm(self, npc_id: str, prompt: Prompt, *, alongside: bool = False) -> WarmResult:
        if self._closed:
            raise BackendError("the backend is closed")
        # Beside a generation on a GPU only: on the CPU it slowed the line more than it saved.
        result = self._engine.warm(npc_id, self.warm_tokens(prompt), alongside=alongside and bool(self.offloaded_layers))
        if result.outcome == "warmed" and self.config.reproducible:
            with self._stats_lock:  # the batched engine counts its own (`engine.stats`)
                self.stats.warm_tokens_evaluated += result.tokens_evaluated
        return result

    def _prepare(self, request: GenerationRequest) -> tuple[PromptTokens, CompiledGrammar | None, int, list[int]]:
        """Prompt tokens, output grammar, token cap and the tokens of the output's given start
        (`output_prefix`, evaluated after the prompt); a typed error when they cannot fit."""
        tokens = self.tokenize_prompt(request.prompt)
        grammar = None
        max_tokens = request.max_tokens
        if request.output_schema is not None:
            try:
                grammar = compile_schema(request.output_schema)
            except UnsupportedSchema as exc:
                raise BackendError(f"output schema: {exc}") from exc
            max_tokens = grammar.max_tokens
        forced = self._model.tokenize(request.output_prefix, add_special=False) if request.output_prefix else []
        if len(forced) >= max_tokens:
            raise BackendError(f"the output's given start ({len(forced)} tokens) leaves no room under the {max_tokens}-token cap")
        max_tokens -= len(forced)
        needed = len(tokens.prefix) + len(tokens.suffix) + len(forced) + max_tokens
        if needed > self.max_sequence_tokens:
            raise BackendError(
                f"prompt ({len(tokens.prefix)}+{len(tokens.suffix)} tokens) plus the longest output "
                f"({len(forced) + max_tokens} tokens) needs {needed} tokens, more than n_ctx={self.max_sequence_tokens}"
            )
        return tokens, grammar, max_tokens, forced

    def _sampler(self, request: GenerationRequest, grammar: CompiledGrammar | None, forced: list[int]) -> TokenSampler:
        avoid = self._model.tokenize(request.avoid_start, add_special=False)[:1] if request.avoid_start else []
        said = [self._model.tokenize(line + "\n", add_special=False) for line in request.said_before]
        guard = DialogueGuard(request.constraints, self.vocabulary.pieces) if request.constraints and grammar else None
        gbnf, first = (grammar.gbnf if grammar else None), (avoid[0] if avoid else None)
        sampler = TokenSampler(
            self.vocabulary, self._sampling, request.seed, gbnf, first, said, guard, fast_forward=self.fast_forward
        )
        try:
            sampler.force(forced)
        except NativeError as exc:
            sampler.close()
            raise BackendError(str(exc)) from exc
        return sampler

    def _count(self, out: EngineOutput) -> None:
        with self._stats_lock:
            self.stats.generations += 1
            self.stats.prompt_tokens_evaluated += out.tokens_evaluated
            self.stats.prompt_tokens_reused += out.tokens_cached
            self.stats.tokens_generated += out.tokens_generated
            self.stats.tokens_forced += out.tokens_forced
            self.stats.decode_calls += out.decode_calls
            self.stats.grammar_full_filters += out.full_filters

    def invalidate(self, npc_id: str) -> bool:
        """Forget what is cached of an NPC's turns (the next turn evaluates its prompt again)."""
        return False if self._closed else self._engine.invalidate(npc_id)  # closed: nothing is cached

    @property
    def continues_output(self) -> bool:
        return True

    @property
    def stops_when_told(self) -> bool:
        return True

    @property
    def guards_dialogue(self) -> bool:
        return True

    @property
    def max_concurrency(self) -> int:
        return self._engine.max_concurrency

    @property
    def resident_prefixes(self) -> int:
        """NPCs whose prompts are cached: resident sequences (batched) or saved prefixes."""
        return self._engine.resident_prefixes

    @property
    def native_model(self) -> NativeModel:
        """The loaded weights (benchmarks build bare contexts on them)."""
        return self._model

    @property
    def engine(self) -> BatchedEngine | None:
        """The batched engine, for its statistics; None with the reproducible one or once closed."""
        return self._engine.engine if not self._closed and isinstance(self._engine, BatchedEngineAdapter) else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._engine.close()
        self._model.close()
