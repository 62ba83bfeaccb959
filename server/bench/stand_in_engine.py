"""A stand-in model server with N slots and a fixed cost per token, for concurrency figures.

It speaks the part of llama-server's HTTP API the remote backend uses (`/v1/models`, `/props`,
`/v1/chat/completions` and `/v1/completions`, streamed or not) and models what matters for
throughput: `slots` generations at once, the rest waiting for a slot; a prompt costs
`prompt_token_ms` per token the slot has not cached (the slot keeps its last prompt, as
llama-server's `cache_prompt` does; `id_slot` picks the slot); each generated token costs
`token_ms`. It streams, honours `max_tokens`, stops generating when the client closes the
stream, and reports cached tokens in `usage` and `timings`. A "token" is 4 characters.

It does not run a model: it writes `replies` (valid NPC outputs) in turn, each NPC (told apart
by its prompt's opening, the system message) from its own place in the list. Failures for tests: `fail_statuses` (answered in turn, before any reply),
`retry_after_s`, `stall_after_tokens`, `n_ctx` (400 past it, as llama-server answers), and
`gather` (concurrency seen as a peak, not a time).

    loreguard bench stand-in-engine --slots 8 --token-ms 20 --port 8090
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: Plain lines that pass a gate (no numbers, names or claims), unlike each other and of about one
#: length (a reply costs the same whichever it is): a stand-in NPC says them in turn, so no reply
#: repeats an earlier one (the gate refuses repeats).
DEFAULT_REPLIES = (
    {"dialogue": "Welcome, traveller. The road is quiet today.", "emotion": "neutral"},
    {"dialogue": "Keep your voice down, friend; it is so late.", "emotion": "neutral"},
    {"dialogue": "I have not seen anyone pass by since dawn.", "emotion": "neutral"},
    {"dialogue": "Mind the mud out there, it rained all night.", "emotion": "neutral"},
    {"dialogue": "Ask me again after my long watch is over.", "emotion": "neutral"},
    {"dialogue": "That is a question for wiser heads than me.", "emotion": "neutral"},
    {"dialogue": "Fine weather for walking, if you ask me so.", "emotion": "neutral"},
    {"dialogue": "Hm. I would rather not talk about that here.", "emotion": "neutral"},
    {"dialogue": "Go on, then. I am listening to you, friend.", "emotion": "neutral"},
    {"dialogue": "Stay out of trouble and we will get along.", "emotion": "neutral"},
    {"dialogue": "Some days nothing happens. Today is one.", "emotion": "neutral"},
    {"dialogue": "You look tired. Rest a while by the fire.", "emotion": "neutral"},
    {"dialogue": "Ha! You have a strange way of asking that.", "emotion": "neutral"},
    {"dialogue": "Keep to the lit streets after dark, friend.", "emotion": "neutral"},
    {"dialogue": "Whatever you heard, it is only half true.", "emotion": "neutral"},
    {"dialogue": "Be quick about it, I have work to do here.", "emotion": "neutral"},
)
_CHARS_PER_TOKEN = 4


@dataclass
class StandInConfig:
    slots: int = 8
    token_ms: float = 20.0
    prompt_token_ms: float = 0.0
    model: str = "stand-in"
    replies: tuple[dict[str, Any], ...] = DEFAULT_REPLIES
    fail_statuses: list[int] = field(default_factory=list)
    retry_after_s: float | None = None
    stall_after_tokens: int | None = None
    n_ctx: int = 0
    #: Tests: every generation waits (up to a minute) until this many are in flight at once, so
    #: a client that sends one at a time shows as a peak of 1, not as a timing.
    gather: int = 0


@dataclass
class StandInStats:
    requests: int = 0
    completed: int = 0
    #: Streams the client closed before the reply ended (the generation stopped there).
    dropped: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    generated_tokens: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0


class StandInEngine:
    """`start()` serves on 127.0.0.1 in a thread of its own; `url` is where; `stop()` ends it."""

    def __init__(self, config: StandInConfig | None = None, port: int = 0) -> None:
        self.config = config or StandInConfig()
        self.stats = StandInStats()
        self._port = port
        self._failures = deque(self.config.fail_statuses)
        self._slot_prompts: list[str] = [""] * self.config.slots
        self._turns: dict[str, int] = {}
        self._slot_used: list[int] = [0] * self.config.slots
        self._uses = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="stand-in-engine", daemon=True)
        self._server: asyncio.Server | None = None
        self._free: asyncio.Queue[int] | None = None
        self._gathered: asyncio.Event | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> StandInEngine:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        """Stop listening, drop every open connection, end the thread."""
        if self._loop.is_closed():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            if self._server is not None:
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def serve_forever(self) -> None:
        self.start()
        self._thread.join()

    async def _listen(self) -> None:
        self._free = asyncio.Queue()
        self._gathered = asyncio.Event()
        for slot in range(self.config.slots):
            self._free.put_nowait(slot)
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self._port)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                method, path, body = request
                if not await self._answer(method, path, body, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _answer(
        self, method: str, path: str, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Write the reply; False when the connection is to close."""
        config = self.config
        if method == "GET" and path == "/v1/models":
            return await _send_json(writer, 200, {"object": "list", "data": [{"id": config.model, "owned_by": "llamacpp"}]})
        if method == "GET" and path == "/props":
            settings = {"n_ctx": config.n_ctx or 4096}
            return await _send_json(writer, 200, {"total_slots": config.slots, "default_generation_settings": settings})
        if method == "GET" and path == "/stand-in/stats":
            return await _send_json(writer, 200, self.stats.__dict__)
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            return await _send_json(writer, 404, {"error": {"code": 404, "message": f"no {method} {path}"}})
        try:
            request = json.loads(body)
        except ValueError:
            return await _send_json(writer, 400, {"error": {"code": 400, "message": "the body is not JSON"}})
        self.stats.requests += 1
        if self._failures:
            status = self._failures.popleft()
            headers = {"Retry-After": f"{config.retry_after_s:g}"} if status == 429 and config.retry_after_s is not None else {}
            return await _send_json(writer, status, {"error": {"code": status, "message": "stand-in failure"}}, headers)
        prompt = request.get("prompt") if path == "/v1/completions" else json.dumps(request.get("messages"))
        prompt_tokens = len(str(prompt)) // _CHARS_PER_TOKEN
        max_tokens = int(request.get("max_tokens") or 256)
        if config.n_ctx and prompt_tokens + max_tokens > config.n_ctx:
            message = f"the request exceeds the available context size ({prompt_tokens + max_tokens} > {config.n_ctx} tokens)"
            return await _send_json(
                writer, 400, {"error": {"code": 400, "message": message, "type": "exceed_context_size_error"}}
            )
        return await self._generate(request, str(prompt), path, reader, writer)

    async def _generate(
        self, request: dict[str, Any], prompt: str, path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        assert self._free is not None
        slot = await self._take_slot(request.get("id_slot"), prompt)
        stats = self.stats
        stats.in_flight += 1
        stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
        closed: asyncio.Future[bytes] | None = None
        try:
            if self.config.gather and self._gathered is not None:
                if stats.in_flight >= self.config.gather:
                    self._gathered.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._gathered.wait(), 60)
            cached = _shared(self._slot_prompts[slot], prompt) // _CHARS_PER_TOKEN
            prompt_tokens = len(prompt) // _CHARS_PER_TOKEN
            self._slot_prompts[slot] = prompt
            stats.cached_tokens += cached
            stats.prompt_tokens += prompt_tokens
            await asyncio.sleep((prompt_tokens - cached) * self.config.prompt_token_ms / 1000)
            text = self._reply(prompt)
            pieces = [text[i : i + _CHARS_PER_TOKEN] for i in range(0, len(text), _CHARS_PER_TOKEN)]
            limit = int(request.get("max_tokens") or len(pieces))
            finish = "stop" if len(pieces) <= limit else "length"
            pieces = pieces[:limit]
            usage = {
                "prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                "total_tokens": prompt_tokens + len(pieces), "prompt_tokens_details": {"cached_tokens": cached},
            }  # fmt: skip
            timings = {"cache_n": cached, "prompt_n": prompt_tokens - cached, "predicted_n": len(pieces)}
            chat = path == "/v1/chat/completions"
            if self.config.stall_after_tokens is not None and not request.get("stream"):
                await reader.read(1)  # a stalled server: no answer until the client gives up
                stats.dropped += 1
                return False
            if not request.get("stream"):
                await asyncio.sleep(len(pieces) * self.config.token_ms / 1000)
                stats.generated_tokens += len(pieces)
                stats.completed += 1
                choice = {"index": 0, "finish_reason": finish}
                choice |= {"message": {"role": "assistant", "content": "".join(pieces)}} if chat else {"text": "".join(pieces)}
                return await _send_json(writer, 200, {"choices": [choice], "usage": usage, "timings": timings})
            # A stream ends its connection (`Connection: close`): the read that notices the client
            # closing it early could otherwise take the first byte of its next request.
            closed = asyncio.ensure_future(reader.read(1))
            await _start_stream(writer)
            for n, piece in enumerate(pieces):
                if self.config.stall_after_tokens is not None and n >= self.config.stall_after_tokens:
                    await closed  # a stalled server: nothing more until the client gives up
                    stats.dropped += 1
                    return False
                await asyncio.sleep(self.config.token_ms / 1000)
                if closed.done():
                    stats.dropped += 1
                    return False
                stats.generated_tokens += 1
                await _send_event(writer, {"choices": [{"index": 0, **_delta(piece, chat), "finish_reason": None}]})
            await _send_event(writer, {"choices": [{"index": 0, **_delta("", chat), "finish_reason": finish}]})
            await _send_event(writer, {"choices": [], "usage": usage, "timings": timings})
            await _send_chunk(writer, b"data: [DONE]\n\n")
            await _send_chunk(writer, b"")
            stats.completed += 1
            return False
        finally:
            if closed is not None:
                closed.cancel()
            stats.in_flight -= 1
            self._free.put_nowait(slot)

    async def _take_slot(self, wanted: Any, prompt: str) -> int:
        """The slot asked for (waiting until it is free), else the free one whose cached prompt
        shares at least half of this one, else the free one used longest ago."""
        assert self._free is not None
        if isinstance(wanted, int) and 0 <= wanted < self.config.slots:
            while True:
                free = [self._free.get_nowait() for _ in range(self._free.qsize())]
                for slot in free:
                    if slot != wanted:
                        self._free.put_nowait(slot)
                if wanted in free:
                    self._uses += 1
                    self._slot_used[wanted] = self._uses
                    return wanted
                await asyncio.sleep(0.001)
        first = await self._free.get()
        others = [self._free.get_nowait() for _ in range(self._free.qsize())]
        best = max([first, *others], key=lambda s: (_shared(self._slot_prompts[s], prompt), -s))
        if _shared(self._slot_prompts[best], prompt) < len(prompt) // 2:
            # As llama-server's --slot-prompt-similarity (0.5): an unlike prompt takes the slot
            # used longest ago rather than evicting a near match.
            best = min([first, *others], key=lambda s: (self._slot_used[s], s))
        self._uses += 1
        self._slot_used[best] = self._uses
        for slot in [first, *others]:
            if slot != best:
                self._free.put_nowait(slot)
        return best

    def _reply(self, prompt: str) -> str:
        npc = hashlib.sha256(prompt[:400].encode()).hexdigest()
        turn = self._turns.get(npc, int(npc[:4], 16))
        self._turns[npc] = turn + 1
        reply = self.config.replies[turn % len(self.config.replies)]
        return json.dumps(
            {"dialogue": reply["dialogue"], "intent": "none", "emotion": reply.get("emotion", "neutral"), "mutations": []}
        )


def _shared(a: str, b: str) -> int:
    """Characters `a` and `b` start with in common."""
    return len(os.path.commonprefix([a, b]))


def _delta(piece: str, chat: bool) -> dict[str, Any]:
    return {"delta": {"content": piece}} if chat else {"text": piece}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    length = 0
    while True:
        header = (await reader.readline()).decode("latin-1").strip()
        if not header:
            break
        name, _, value = header.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return method, path.split("?", 1)[0], await reader.readexactly(length) if length else b""


async def _send_json(writer: asyncio.StreamWriter, status: int, body: Any, headers: dict[str, str] | None = None) -> bool:
    data = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n"
    writer.write(head.encode() + data)
    await writer.drain()
    return True


async def _start_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n")
    await writer.drain()


async def _send_event(writer: asyncio.StreamWriter, payload: dict[str, Any]) -> None:
    await _send_chunk(writer, b"data: " + json.dumps(payload).encode() + b"\n\n")


async def _send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()
