"""What serves the model at a URL: which engine, which models, how many sequences at once.

`probe` asks the server before the sidecar listens (so a wrong URL, a server that answers
something other than JSON, or a model it does not have is one line at start-up) and learns what
the backend needs to drive it as a peer of the in-process engine: its slots (the connection
pool and the sidecar's workers), its context, and its chat template where it publishes one.

Engines are told apart by what they answer: llama.cpp's `llama-server` has `/props`; vLLM
and SGLang name themselves in `/v1/models` (`owned_by`); llama-cpp-python's server says
`owned_by: "me"`. Anything else is driven as a plain OpenAI-compatible server.
"""

from __future__ import annotations

from typing import Any, Literal

from loreguard.schemas.base import FrozenModel
from loreguard.server.inference.base import BackendError
from loreguard.server.inference.remote_http import RemoteHTTP

EngineKind = Literal["llama-server", "llama-cpp-python", "vllm", "sglang", "openai"]


class RemoteEngineError(BackendError, ValueError):
    """The server cannot serve this sidecar: one line saying why and what to do."""


class RemoteEngine(FrozenModel):
    kind: EngineKind
    #: The model name every request carries.
    model: str
    #: Sequences this sidecar asks the server for at once: the user's `slots` (at most the
    #: server's), else the server's own figure where it publishes one, else a default.
    slots: int
    #: Where `slots` came from: `server` (it said), `user` (`--parallel`) or `default`.
    slots_from: Literal["server", "user", "default"]
    #: Tokens one sequence may hold (0: the server does not say).
    n_ctx: int = 0
    #: The server's chat template and its BOS/EOS text (llama-server's `/props`), for raw
    #: completions; None: unknown.
    chat_template: str | None = None
    bos_token: str = ""
    eos_token: str = ""


#: `owned_by` in `/v1/models`, per engine.
_OWNERS: dict[str, EngineKind] = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama-server", "me": "llama-cpp-python"}


def probe(http: RemoteHTTP, *, model: str | None, slots: int) -> RemoteEngine:
    """Ask the server at `http.base_url` what it serves; `RemoteEngineError` when it cannot
    serve (unreachable, not JSON, no such model)."""
    try:
        listing = http.get_json("/v1/models")
    except BackendError as exc:
        raise RemoteEngineError(f"{exc}; is the model server running? (--base-url {http.base_url})") from exc
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("id"), str) for e in entries):
        raise RemoteEngineError(f"{http.base_url}/v1/models is not an OpenAI model list: is --base-url a model server?")
    names = [e["id"] for e in entries]
    if not names:
        raise RemoteEngineError(f"{http.base_url} serves no model yet")
    chosen = model or names[0]
    if chosen not in names:
        raise RemoteEngineError(f"{http.base_url} has no model {chosen!r}; it serves: {', '.join(names)}")
    entry = entries[names.index(chosen)]
    kind: EngineKind = _OWNERS.get(str(entry.get("owned_by", "")), "openai")
    props = _optional(http, "/props") if kind in ("llama-server", "openai") else None
    if isinstance(props, dict) and "total_slots" in props:
        kind = "llama-server"
    server_slots, n_ctx, template = _capacity(kind, entry, props, _optional(http, "/server_info") if kind == "sglang" else None)
    if slots:  # the user's share: several sidecars may share one server
        found, source = min(slots, server_slots) if server_slots else slots, "user"
    elif server_slots:
        found, source = server_slots, "server"
    else:
        # vLLM does not publish --max-num-seqs (256 by default): 8 at once keeps a game's NPCs
        # moving without flooding a shared server; --parallel says otherwise.
        found, source = (8 if kind == "vllm" else 1), "default"
    tokens = props if isinstance(props, dict) else {}
    return RemoteEngine(
        kind=kind, model=chosen, slots=found, slots_from=source, n_ctx=n_ctx, chat_template=template or None,
        bos_token=str(tokens.get("bos_token") or ""), eos_token=str(tokens.get("eos_token") or ""),
    )  # fmt: skip


def _capacity(kind: EngineKind, entry: dict[str, Any], props: Any, sglang: Any) -> tuple[int, int, str]:
    """(slots, n_ctx per sequence, chat template) as far as the engine publishes them."""
    if kind == "llama-server" and isinstance(props, dict):
        settings = props.get("default_generation_settings") or {}
        return _int(props.get("total_slots")), _int(settings.get("n_ctx")), str(props.get("chat_template") or "")
    if kind == "vllm":
        return 0, _int(entry.get("max_model_len")), ""
    if kind == "sglang":
        info = sglang if isinstance(sglang, dict) else {}
        return _int(info.get("max_running_requests")), _int(info.get("context_length") or entry.get("max_model_len")), ""
    if kind == "llama-cpp-python":
        return 1, 0, ""  # one request at a time: its server holds one lock around every call
    return 0, 0, ""


def _optional(http: RemoteHTTP, path: str) -> Any:
    try:
        return http.get_json(path, timeout_s=5.0)
    except BackendError:
        return None


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
