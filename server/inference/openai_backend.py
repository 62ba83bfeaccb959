"""Inference over HTTP, for games that outgrow one machine: llama.cpp's `llama-server`, vLLM,
SGLang or llama-cpp-python's server, driven as a peer of the in-process engine.

* **Concurrency.** One connection per generation in flight, as many as the server has slots
  (`remote_engine.probe` asks it; `slots` where it does not say), so the sidecar runs that many
  interactions at once, each NPC's still in order. On llama-server each NPC keeps its slot
  while it is free (`SlotTable`), so its prompt prefix stays cached there.
* **Streaming.** Server-sent events feed the incremental gate as the model writes; a cut
  closes the stream, which stops the remote generation.
* **Structured output** as each engine takes it (`schema_mode`): our bounded GBNF grammar in
  `grammar` for llama.cpp engines, `response_format` with the JSON Schema for vLLM, SGLang and
  other OpenAI-compatible servers.
* **Continuation.** With a chat template (the server's own from llama-server's `/props`, or
  `chat_template`), prompts go to `/v1/completions` rendered exactly as the in-process engine
  renders them: the server's prefix cache sees the same bytes, and a retry after a cut
  continues the words the player saw (the prompt ends with them; the grammar is the rest of
  the output). Without one, prompts go to `/v1/chat/completions` and `continues_output` is
  False (`hello` says so in the fingerprint's `extra`).
* **Failure** (remote_http.py): retries with backoff, 429's `Retry-After`, stalls, a circuit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.inference.base import (
    BackendError,
    Generation,
    GenerationRequest,
    InferenceBackend,
    Observer,
    WarmResult,
)
from loreguard.server.inference.chat_template import ChatTemplate, TemplateError
from loreguard.server.inference.grammar import UnsupportedSchema, compile_schema
from loreguard.server.inference.remote_engine import RemoteEngine, RemoteEngineError, probe
from loreguard.server.inference.remote_http import CircuitBreaker, RemoteHTTP, RetryPolicy

#: A server's own JSON Schema grammar may allow whitespace ours does not: room so it is never cut.
_SCHEMA_TOKEN_SLACK = 2
#: Engines that take our GBNF grammar in a `grammar` field.
_GBNF_ENGINES = ("llama-server", "llama-cpp-python")

_log = logging.getLogger("loreguard.inference")


class OpenAICompatibleConfig(FrozenModel):
    base_url: str = "http://127.0.0.1:8080"
    #: The model name requests carry; None: the server's first (most serve one).
    model: str | None = None
    api_key: str | None = None
    #: `auto`: `grammar` for llama.cpp engines, `json_schema` for the others.
    schema_mode: Literal["auto", "grammar", "json_schema", "json_object"] = "auto"
    #: Longest one generation may take, retries included, when the request sets no deadline.
    timeout_s: float = Field(default=50.0, gt=0)
    #: A reply that sends nothing for this long has stalled.
    stall_s: float = Field(default=15.0, gt=0)
    temperature: float = Field(default=0.7, ge=0)
    top_k: int = Field(default=40, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    #: Sequences to ask for at once (`--parallel`): this sidecar's share of a server others use
    #: too; 0: all the server says it has.
    slots: int = Field(default=0, ge=0)
    #: A built-in name (`chatml`, `gemma`) or Jinja source of the served model's chat template,
    #: for raw completions; None: the server's own where it publishes it (llama-server).
    chat_template: str | None = None
    bos_token: str = ""
    eos_token: str = ""
    retry: int = Field(default=3, ge=1, le=10)
    circuit_threshold: int = Field(default=3, ge=1)
    circuit_cooldown_s: float = Field(default=5.0, gt=0)


class SlotTable:
    """Which server slot each NPC's generation uses: the slot it used last when that is free
    (its prefix is cached there), else the free slot used longest ago."""

    def __init__(self, slots: int) -> None:
        self._free: OrderedDict[int, str | None] = OrderedDict((s, None) for s in range(slots))
        self._lock = threading.Lock()

    def take(self, npc_id: str) -> int | None:
        with self._lock:
            for slot, owner in self._free.items():
                if owner == npc_id:
                    del self._free[slot]
                    return slot
            if not self._free:
                return None  # more generations than slots: let the server pick
            slot, _ = self._free.popitem(last=False)
            return slot

    def give_back(self, slot: int | None, npc_id: str) -> None:
        if slot is not None:
            with self._lock:
                self._free[slot] = npc_id


class OpenAICompatibleBackend(InferenceBackend):
    name = "openai-compatible"

    def __init__(self, config: OpenAICompatibleConfig | None = None, *, engine: RemoteEngine | None = None) -> None:
        """Asks the server what it serves (`RemoteEngineError` when it cannot serve) unless
        `engine` says it already."""
        self.config = config or OpenAICompatibleConfig()
        url = urlsplit(self.config.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise RemoteEngineError(f"--base-url must be an http:// or https:// URL, not {self.config.base_url!r}")
        self.http = RemoteHTTP(
            self.config.base_url,
            api_key=self.config.api_key,
            connections=max(1, self.config.slots),
            stall_s=self.config.stall_s,
            retry=RetryPolicy(attempts=self.config.retry),
            breaker=CircuitBreaker(self.config.circuit_threshold, self.config.circuit_cooldown_s),
        )
        try:
            self.engine = engine or probe(self.http, model=self.config.model, slots=self.config.slots)
        except Exception:
            self.http.close()
            raise
        if self.engine.slots > max(1, self.config.slots):
            self.http.resize(self.engine.slots)
        source = self.config.chat_template or self.engine.chat_template
        self.bos_token = self.config.bos_token or self.engine.bos_token
        eos = self.config.eos_token or self.engine.eos_token
        self.template = _usable(ChatTemplate(source, bos_token=self.bos_token, eos_token=eos)) if source else None
        mode = self.config.schema_mode
        self.schema_mode = mode if mode != "auto" else ("grammar" if self.engine.kind in _GBNF_ENGINES else "json_schema")
        # Each NPC keeps a llama-server slot only when this sidecar has them all: sidecars sharing
        # a server (each with its --parallel share) leave the choice to the server, which picks
        # the free slot whose cached prompt is most alike.
        owns_slots = self.engine.kind == "llama-server" and self.engine.slots_from == "server"
        self._slots = SlotTable(self.engine.slots) if owns_slots else None

    @property
    def max_concurrency(self) -> int:
        return self.engine.slots

    @property
    def continues_output(self) -> bool:
        """A raw completion can end with the words to go on from, and our grammar can be the
        rest of the output: both need the chat template and a GBNF-taking engine."""
        return self.template is not None and self.schema_mode == "grammar"

    def generate(self, request: GenerationRequest) -> Generation:
        """One reply in one response: nobody watches it grow, so no event per token to parse."""
        return self._generate(request, None)

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        return self._generate(request, observe)

    def _generate(self, request: GenerationRequest, observe: Observer | None) -> Generation:
        path, body, prefix = self._request(request, streamed=observe is not None)
        slot = self._slots.take(request.npc_id) if self._slots is not None else None
        if slot is not None:
            body["id_slot"] = slot
        started = time.perf_counter()
        deadline = time.monotonic() + (request.timeout_ms / 1000 if request.timeout_ms else self.config.timeout_s)
        try:
            if observe is not None:
                return self._stream(path, body, prefix, observe, started, deadline)
            reply = self.http.post_json(path, body, deadline=deadline)
        finally:
            if self._slots is not None:
                self._slots.give_back(slot, request.npc_id)
        ended = time.perf_counter()
        try:
            choice = reply["choices"][0]
            text = (choice["message"]["content"] if "message" in choice else choice["text"]) or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"unexpected reply shape from {self.config.base_url}{path}: {str(reply)[:300]}") from exc
        usage = _usage_of(reply)
        prompt_tokens, cached = _prompt_usage(usage)
        return Generation(
            text=prefix + text,
            tokens_evaluated=max(0, prompt_tokens - cached),
            tokens_cached=cached,
            tokens_generated=int(usage.get("completion_tokens") or 0),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            ttft_ms=(ended - started) * 1000,  # a whole reply's first token is not seen: its end stands in
            total_ms=(ended - started) * 1000,
        )

    def _stream(
        self, path: str, body: dict[str, Any], prefix: str, observe: Observer, started: float, deadline: float
    ) -> Generation:
        text, pieces, first_at = prefix, 0, 0.0
        finish: Literal["stop", "length", "aborted"] = "stop"
        usage: dict[str, Any] = {}
        with self.http.events(path, body, deadline=deadline) as events:
            for event in events:
                usage = {**usage, **(event.get("usage") or {})}
                if event.get("timings"):
                    usage["timings"] = event["timings"]
                choice = (event.get("choices") or [{}])[0]
                piece = _piece(choice)
                if piece:
                    pieces += 1
                    first_at = first_at or time.perf_counter()
                    text += piece
                    if not observe(text):
                        finish = "aborted"
                        break  # leaving the block closes the stream: the server stops generating
                if choice.get("finish_reason"):
                    finish = "length" if choice["finish_reason"] == "length" else "stop"
        ended = time.perf_counter()
        prompt_tokens, cached = _prompt_usage(usage)
        return Generation(
            text=text,
            tokens_evaluated=max(0, prompt_tokens - cached),
            tokens_cached=cached,
            tokens_generated=int(usage.get("completion_tokens") or pieces),
            finish_reason=finish,
            ttft_ms=((first_at or ended) - started) * 1000,
            total_ms=(ended - started) * 1000,
        )

    def _request(self, request: GenerationRequest, *, streamed: bool) -> tuple[str, dict[str, Any], str]:
        """The endpoint, the body and the output's given start (already written)."""
        prefix = request.output_prefix if self.continues_output else ""
        fields, max_tokens = self._schema_fields(request.output_schema, request.max_tokens, prefix)
        body: dict[str, Any] = {
            "model": self.engine.model,
            "seed": request.seed,
            "max_tokens": max_tokens,
            "temperature": self.config.temperature,
            "top_p": self.config.top_p,
            "top_k": self.config.top_k,
            "stream": streamed,
            **fields,
        }
        if streamed:  # usage in a last event (vLLM refuses stream_options without a stream)
            body["stream_options"] = {"include_usage": True}
        if self.engine.kind == "llama-server":
            body["cache_prompt"] = True  # keep the evaluated prompt in the slot for the next turn
        if self.template is None:
            return "/v1/chat/completions", {**body, "messages": request.prompt.messages()}, ""
        return "/v1/completions", {**body, "prompt": self.render(request.prompt) + prefix}, prefix

    def render(self, prompt: Prompt) -> str:
        """The prompt in the served model's template, as the in-process engine renders it (a
        server adds the BOS token itself)."""
        assert self.template is not None
        try:
            split = self.template.render(prompt.messages())
        except TemplateError as exc:
            raise BackendError(str(exc)) from exc
        text = split.prefix + split.suffix
        bos = self.bos_token
        return text[len(bos) :] if bos and text.startswith(bos) else text

    def _schema_fields(self, schema: dict[str, Any] | None, max_tokens: int, prefix: str) -> tuple[dict[str, Any], int]:
        if schema is None:
            return {}, max_tokens
        try:
            grammar = compile_schema(schema, after_prefix=prefix)
        except UnsupportedSchema as exc:
            raise BackendError(f"output schema: {exc}") from exc
        mode = self.schema_mode
        if mode == "grammar":
            return {"grammar": grammar.gbnf}, grammar.max_tokens
        if mode == "json_schema":
            response_format = {"type": "json_schema", "json_schema": {"name": "npc_reply", "schema": schema, "strict": True}}
        else:
            response_format = {"type": "json_object", "schema": schema}
        return {"response_format": response_format}, grammar.max_tokens * _SCHEMA_TOKEN_SLACK

    def warm(self, npc_id: str, prompt: Prompt, *, alongside: bool = False) -> WarmResult:
        """On llama-server with its template: the NPC's prompt up to its new message evaluated
        into the slot it will use (one token generated and thrown away)."""
        if self.template is None or self._slots is None:
            return WarmResult(outcome="unsupported")
        text = self.render(prompt.before_new_message())
        slot = self._slots.take(npc_id)
        body = {"model": self.engine.model, "prompt": text, "max_tokens": 1, "cache_prompt": True, "temperature": 0.0}
        if slot is not None:
            body["id_slot"] = slot
        try:
            reply = self.http.post_json("/v1/completions", body, deadline=time.monotonic() + self.config.timeout_s)
        finally:
            self._slots.give_back(slot, npc_id)
        prompt_tokens, cached = _prompt_usage(_usage_of(reply))
        outcome: Literal["warmed", "already"] = "already" if prompt_tokens and cached >= prompt_tokens - 1 else "warmed"
        return WarmResult(outcome=outcome, tokens=prompt_tokens, tokens_evaluated=max(0, prompt_tokens - cached))

    def fingerprint(self) -> ModelFingerprint:
        return ModelFingerprint(
            backend=self.name,
            file_name=self.engine.model,
            n_ctx=self.engine.n_ctx,
            extra={
                "base_url": self.config.base_url,
                "engine": self.engine.kind,
                "slots": self.engine.slots,
                "structured_output": self.schema_mode,
                "streams": True,
                "continues_output": self.continues_output,
            },
        )

    def circuit_open(self) -> bool:
        return self.http.breaker.is_open

    def close(self) -> None:
        self.http.close()


def _usable(template: ChatTemplate) -> ChatTemplate | None:
    """`template` if it renders a split prompt (a server's template may call functions our
    renderer lacks); None sends chat messages instead, and the server renders them."""
    probe_messages = [{"role": "system", "content": "system text"}, {"role": "user", "content": "user text"}]
    try:
        template.render(probe_messages)
    except Exception as exc:  # the template's own code failed: anything a Jinja template may raise
        _log.info("the server's chat template does not render here (%s: %s); sending chat messages", type(exc).__name__, exc)
        return None
    return template


def _piece(choice: dict[str, Any]) -> str:
    """The text a streamed chunk adds: a chat delta's content, or a completion's text."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


def _usage_of(reply: dict[str, Any]) -> dict[str, Any]:
    """A whole reply's `usage`, with llama-server's `timings` in it."""
    return {**(reply.get("usage") or {}), "timings": reply.get("timings") or {}}


def _prompt_usage(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, of them cached) from the OpenAI usage fields, or llama-server's timings."""
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    timings = usage.get("timings") or {}
    if not cached and isinstance(timings, dict) and timings.get("cache_n") is not None:
        cached = int(timings["cache_n"])
        prompt = prompt or cached + int(timings.get("prompt_n") or 0)
    return prompt, min(cached, prompt) if prompt else cached
