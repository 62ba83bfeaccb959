"""Inference over HTTP, for games that outgrow one machine.

Talks to any server with an OpenAI-style `/v1/chat/completions` endpoint: llama.cpp's
`llama-server`, llama-cpp-python's `llama_cpp.server`, or vLLM. The static prefix goes in the
system message and the dynamic suffix in the user message, so a server that caches prompt
prefixes (`cache_prompt`, one slot per NPC) reuses each NPC's prefix the way the in-process
backend does.

How the output schema reaches the server depends on the server (`schema_mode`):
* `grammar` (default): our own bounded GBNF grammar in the `grammar` field, understood by
  llama.cpp-based servers; `max_tokens` is then the grammar's exact worst case;
* `json_schema`: `response_format={"type": "json_schema", ...}` (vLLM, llama-server);
* `json_object`: `response_format={"type": "json_object", "schema": ...}` (llama-cpp-python).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
import time
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.pipeline.inference.base import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    Generation,
    GenerationRequest,
    InferenceBackend,
)
from loreguard.server.pipeline.inference.grammar import UnsupportedSchema, compile_schema

#: The server's grammar may allow whitespace ours does not; leave room so it is never cut off.
_SCHEMA_TOKEN_SLACK = 2


class OpenAICompatibleConfig(FrozenModel):
    base_url: str = "http://127.0.0.1:8080"
    model: str = "default"
    api_key: str | None = None
    schema_mode: Literal["grammar", "json_schema", "json_object"] = "grammar"
    timeout_s: float = Field(default=120.0, gt=0)
    temperature: float = Field(default=0.7, ge=0)
    top_k: int = Field(default=40, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    #: Server slots to spread NPCs over (llama-server `--parallel`); 0 lets the server choose.
    slots: int = Field(default=0, ge=0)


class OpenAICompatibleBackend(InferenceBackend):
    name = "openai-compatible"

    def __init__(self, config: OpenAICompatibleConfig | None = None) -> None:
        self.config = config or OpenAICompatibleConfig()
        url = urlsplit(self.config.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be an http(s) URL, not {self.config.base_url!r}")
        self._scheme = url.scheme
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._path = url.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self.config.timeout_s)
        return self._conn

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        payload = json.dumps(body).encode()
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request("POST", self._path + path, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except TimeoutError as exc:
                self.close()
                raise BackendTimeout(f"{self.config.base_url} did not answer within {self.config.timeout_s}s") from exc
            except (OSError, http.client.HTTPException) as exc:
                # A kept-alive connection the server closed: retry once on a fresh one.
                self.close()
                if attempt == 2:
                    raise BackendUnavailable(f"cannot reach {self.config.base_url}: {exc}") from exc
                continue
            if response.status != 200:
                raise BackendError(f"{self.config.base_url}{path} answered {response.status}: {data[:300]!r}")
            try:
                return json.loads(data)
            except ValueError as exc:
                raise BackendError(f"{self.config.base_url}{path} answered with invalid JSON") from exc
        raise AssertionError("unreachable")

    def _schema_fields(self, schema: dict[str, Any] | None, max_tokens: int) -> tuple[dict[str, Any], int]:
        if schema is None:
            return {}, max_tokens
        mode = self.config.schema_mode
        if mode == "json_schema":
            fields: dict[str, Any] = {
                "response_format": {"type": "json_schema", "json_schema": {"name": "npc_reply", "schema": schema, "strict": True}}
            }
        elif mode == "json_object":
            fields = {"response_format": {"type": "json_object", "schema": schema}}
        else:
            fields = {}
        try:
            grammar = compile_schema(schema)
        except UnsupportedSchema as exc:
            raise BackendError(f"output schema: {exc}") from exc
        if mode == "grammar":
            fields["grammar"] = grammar.gbnf
            return fields, grammar.max_tokens
        return fields, grammar.max_tokens * _SCHEMA_TOKEN_SLACK

    def _slot(self, npc_id: str) -> int | None:
        if not self.config.slots:
            return None
        digest = hashlib.sha256(npc_id.encode()).digest()
        return int.from_bytes(digest[:4], "big") % self.config.slots

    def generate(self, request: GenerationRequest) -> Generation:
        schema_fields, max_tokens = self._schema_fields(request.output_schema, request.max_tokens)
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": request.prompt.messages(),
            "seed": request.seed,
            "max_tokens": max_tokens,
            "temperature": self.config.temperature,
            "top_p": self.config.top_p,
            "top_k": self.config.top_k,
            "stream": False,
            # llama-server: keep the evaluated prompt for the next request in the same slot.
            "cache_prompt": True,
            **schema_fields,
        }
        slot = self._slot(request.npc_id)
        if slot is not None:
            body["id_slot"] = slot
        started = time.perf_counter()
        with self._lock:
            reply = self._post("/v1/chat/completions", body)
        elapsed_ms = (time.perf_counter() - started) * 1000
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] or ""
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
            usage = reply.get("usage") or {}
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"unexpected reply shape from {self.config.base_url}: {str(reply)[:300]}") from exc
        return Generation(
            text=text,
            tokens_evaluated=int(usage.get("prompt_tokens", 0)),
            tokens_generated=int(usage.get("completion_tokens", 0)),
            finish_reason=finish,
            ttft_ms=elapsed_ms,
            total_ms=elapsed_ms,
        )

    def fingerprint(self) -> ModelFingerprint:
        return ModelFingerprint(backend=self.name, file_name=self.config.model, extra={"base_url": self.config.base_url})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
