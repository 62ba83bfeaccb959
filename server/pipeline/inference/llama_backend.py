"""In-process llama.cpp inference with per-NPC prefix reuse and bounded constrained decoding.

Every generation takes the same path, whatever is cached:

1. render the prompt with the chat template and split it after the static prefix;
2. put the NPC's prefix in the KV cache: restore its saved state, or evaluate it from an empty
   cache and save the state for next time;
3. evaluate the dynamic suffix in fixed batches;
4. sample with the request's seed, constrained by the grammar of the output schema.

Because step 2 always leaves the cache holding exactly the prefix, evaluated the same way, the
same prompt and seed give the same text whether the prefix came from the cache or not, after
any number of other NPCs' turns, and in another process.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from array import array
from dataclasses import dataclass

import llama_cpp
from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.pipeline.inference.base import (
    BackendError,
    Generation,
    GenerationRequest,
    InferenceBackend,
)
from loreguard.server.pipeline.inference.chat_template import ChatTemplate, TemplateError
from loreguard.server.pipeline.inference.grammar import UnsupportedSchema, compile_schema
from loreguard.server.pipeline.inference.llama_native import (
    NativeContext,
    NativeError,
    NativeModel,
    SamplingParams,
    TokenSampler,
    supports_gpu_offload,
)
from loreguard.server.pipeline.inference.models import file_prefix_sha256, resolve_model_path
from loreguard.server.pipeline.inference.prefix_cache import PrefixCache, PrefixState
from loreguard.server.pipeline.prompt import Prompt


def default_threads() -> int:
    """One core fewer than the machine has (at least one): the game keeps a core to itself."""
    return max(1, (os.cpu_count() or 2) - 1)


class LlamaCppConfig(FrozenModel):
    #: A GGUF file; None means the embedded default model.
    model_path: str | None = None
    n_ctx: int = Field(default=8192, ge=256)
    n_batch: int = Field(default=512, ge=8)
    #: None: one fewer than the CPU count.
    n_threads: int | None = Field(default=None, ge=1)
    #: Layers to offload to the GPU; -1 offloads all. Needs a CUDA (or Metal...) build.
    n_gpu_layers: int = Field(default=0, ge=-1)
    #: A built-in name (`chatml`, `gemma`) or Jinja source; None uses the template in the GGUF.
    chat_template: str | None = None
    temperature: float = Field(default=0.7, ge=0)
    top_k: int = Field(default=40, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    #: Memory for saved NPC prefixes; least recently used prefixes are dropped past it.
    prefix_cache_bytes: int = Field(default=512 << 20, ge=0)


@dataclass(frozen=True)
class PromptTokens:
    prefix: list[int]
    suffix: list[int]

    @property
    def prefix_key(self) -> str:
        return hashlib.sha256(array("i", self.prefix).tobytes()).hexdigest()


@dataclass
class BackendStats:
    generations: int = 0
    prompt_tokens_evaluated: int = 0
    tokens_generated: int = 0
    grammar_full_filters: int = 0


class LlamaCppBackend(InferenceBackend):
    name = "llama.cpp"

    def __init__(self, config: LlamaCppConfig | None = None) -> None:
        self.config = config or LlamaCppConfig()
        self.model_path = resolve_model_path(self.config.model_path)
        self.n_threads = self.config.n_threads or default_threads()
        try:
            self._model = NativeModel(str(self.model_path), n_gpu_layers=self.config.n_gpu_layers)
            self._ctx = NativeContext(self._model, n_ctx=self.config.n_ctx, n_batch=self.config.n_batch, n_threads=self.n_threads)
        except NativeError as exc:
            raise BackendError(str(exc)) from exc
        self.metadata = self._model.metadata()
        bos = self._model.bos_token
        #: The BOS token's text, which some chat templates write themselves.
        self.bos_text = self._model.token_text(bos) if bos >= 0 else ""
        self.template = self._load_template()
        self.prefix_cache = PrefixCache(self.config.prefix_cache_bytes)
        self.stats = BackendStats()
        self._sampling = SamplingParams(self.config.temperature, self.config.top_k, self.config.top_p)
        self._lock = threading.Lock()
        self._fingerprint = self._make_fingerprint()

    def _load_template(self) -> ChatTemplate:
        source = self.config.chat_template or self.metadata.get("tokenizer.chat_template")
        if not source:
            raise BackendError(f"{self.model_path.name} has no chat template; pass one (chat_template='chatml' or 'gemma')")
        eos = self._model.token_text(self._model.eos_token) if self._model.eos_token >= 0 else ""
        return ChatTemplate(source, bos_token=self.bos_text, eos_token=eos)

    @property
    def offloaded_layers(self) -> int:
        """Layers running on the GPU: 0 on a CPU-only build."""
        if not supports_gpu_offload() or self.config.n_gpu_layers == 0:
            return 0
        n_layer = self._model.n_layer + 1  # llama.cpp counts the output layer too
        return n_layer if self.config.n_gpu_layers < 0 else min(self.config.n_gpu_layers, n_layer)

    def _make_fingerprint(self) -> ModelFingerprint:
        description = self._model.description()
        return ModelFingerprint(
            backend=self.name,
            file_name=self.model_path.name,
            size_bytes=self.model_path.stat().st_size,
            header_sha256=file_prefix_sha256(self.model_path),
            quantization=description.rsplit(" ", 1)[-1] if description else "",
            n_ctx=self._ctx.n_ctx,
            extra={
                "description": description,
                "llama_cpp_python": llama_cpp.__version__,
                "gpu_offload_supported": supports_gpu_offload(),
                "offloaded_layers": self.offloaded_layers,
                "chat_template_sha256": hashlib.sha256(self.template.source.encode()).hexdigest(),
            },
        )

    def fingerprint(self) -> ModelFingerprint:
        return self._fingerprint

    def tokenize_prompt(self, prompt: Prompt) -> PromptTokens:
        """The prompt in the model's template, as prefix and suffix token ids.

        The two halves are tokenized separately so that the prefix tokens never depend on the
        suffix: that is what makes the prefix cacheable.
        """
        try:
            split = self.template.render(prompt.static_prefix, prompt.dynamic_suffix)
        except TemplateError as exc:
            raise BackendError(str(exc)) from exc
        prefix_text = split.prefix
        bos_text = self.bos_text
        if self._model.adds_bos and bos_text and prefix_text.startswith(bos_text):
            prefix_text = prefix_text[len(bos_text) :]
        return PromptTokens(
            prefix=self._model.tokenize(prefix_text, add_special=True),
            suffix=self._model.tokenize(split.suffix, add_special=False),
        )

    def generate(self, request: GenerationRequest) -> Generation:
        with self._lock:
            try:
                return self._generate(request)
            except NativeError as exc:
                # The cache may hold a half-written sequence: start the next call from scratch.
                self._ctx.clear()
                raise BackendError(str(exc)) from exc

    def _generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        tokens = self.tokenize_prompt(request.prompt)
        grammar = None
        max_tokens = request.max_tokens
        if request.output_schema is not None:
            try:
                grammar = compile_schema(request.output_schema)
            except UnsupportedSchema as exc:
                raise BackendError(f"output schema: {exc}") from exc
            max_tokens = grammar.max_tokens
        needed = len(tokens.prefix) + len(tokens.suffix) + max_tokens
        if needed > self._ctx.n_ctx:
            raise BackendError(
                f"prompt ({len(tokens.prefix)}+{len(tokens.suffix)} tokens) plus the longest output "
                f"({max_tokens} tokens) needs {needed} tokens, more than n_ctx={self._ctx.n_ctx}"
            )

        evaluated = self._load_prefix(request.npc_id, tokens)
        cached = len(tokens.prefix) - evaluated
        self._ctx.evaluate(tokens.suffix)
        evaluated += len(tokens.suffix)

        sampler = TokenSampler(self._model, self._sampling, request.seed, grammar.gbnf if grammar else None)
        try:
            out = bytearray()
            generated = 0
            finish: str = "length"
            ttft_ms = 0.0
            while generated < max_tokens:
                token = sampler.sample(self._ctx)
                if generated == 0:
                    ttft_ms = (time.perf_counter() - started) * 1000
                generated += 1
                if self._model.is_end_of_generation(token):
                    finish = "stop"
                    break
                out += self._model.piece(token)
                self._ctx.evaluate([token])
            full_filters = sampler.full_filters
        finally:
            sampler.close()

        self.stats.generations += 1
        self.stats.prompt_tokens_evaluated += evaluated
        self.stats.tokens_generated += generated
        self.stats.grammar_full_filters += full_filters
        return Generation(
            text=out.decode("utf-8", "replace"),
            tokens_evaluated=evaluated,
            tokens_cached=cached,
            tokens_generated=generated,
            finish_reason=finish,
            ttft_ms=ttft_ms,
            total_ms=(time.perf_counter() - started) * 1000,
        )

    def _load_prefix(self, npc_id: str, tokens: PromptTokens) -> int:
        """Leave exactly the NPC's prefix in the KV cache; return how many tokens were evaluated."""
        key = tokens.prefix_key
        cached = self.prefix_cache.get(npc_id, key)
        if cached is not None:
            self._ctx.restore_sequence(cached.state, cached.n_tokens)
            return 0
        self._ctx.clear()
        self._ctx.evaluate(tokens.prefix)
        self.prefix_cache.put(npc_id, PrefixState(key=key, n_tokens=len(tokens.prefix), state=self._ctx.save_sequence()))
        return len(tokens.prefix)

    def invalidate(self, npc_id: str) -> bool:
        """Forget an NPC's cached prefix (the next turn evaluates it again)."""
        with self._lock:
            return self.prefix_cache.invalidate(npc_id)

    def close(self) -> None:
        with self._lock:
            self._ctx.close()
            self._model.close()
