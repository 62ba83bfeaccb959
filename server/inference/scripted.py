"""A backend that returns recorded outputs in order: deterministic tests and benchmarks of the
governance plane, with no model in the loop."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping

from loreguard.memory.hashing import sha256_hex
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.inference.base import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    Generation,
    GenerationRequest,
    InferenceBackend,
    Observer,
)

#: Characters per scripted "token" when streaming: the text arrives in pieces this long.
STREAM_PIECE_CHARS = 4


class ScriptExhausted(BackendUnavailable):
    """The script has no output left for this NPC."""


class ScriptedBackend(InferenceBackend):
    """Outputs in order, either one shared queue or one queue per NPC id.

    Judge requests (semantic gate) are answered from `judge_outputs` when given, else refused
    as unavailable, which exercises the judge's keyword fallback.
    """

    name = "scripted"

    def __init__(
        self,
        outputs: Iterable[str] | Mapping[str, Iterable[str]] = (),
        *,
        judge_outputs: Iterable[str] = (),
        cycle: bool = False,
        latency_s: float = 0.0,
        special_tokens: Iterable[str] = (),
        continues: bool = False,
        guards: bool = False,
    ) -> None:
        if isinstance(outputs, Mapping):
            self._per_npc = {npc: deque(items) for npc, items in outputs.items()}
            self._shared: deque[str] | None = None
        else:
            self._per_npc = {}
            self._shared = deque(outputs)
        self._judge = deque(judge_outputs)
        #: Reuse outputs round-robin instead of running out (a long-running scripted sidecar);
        #: requests are then not kept either.
        self.cycle = cycle
        self.requests: list[GenerationRequest] = []
        #: Seconds each dialogue generation takes, like a model's (a game's wait states show). A
        #: request's `timeout_ms` cuts the wait short, as it cuts a model's generation, and so
        #: does `close`.
        self.latency_s = latency_s
        self._closed = threading.Event()
        #: What this stand-in model calls its special tokens (none unless a test says so).
        self._special_tokens = tuple(sorted(set(special_tokens)))
        #: Honour `output_prefix` (a streamed retry continuing released words): the script then
        #: holds what the model writes after the given start, and the output is both.
        self.continues = continues
        #: Ask for the dialogue's constraints as a model's guarded sampler would (a test reads
        #: them in `requests`); the script is written already, so nothing is kept out of it.
        self.guards = guards

    @property
    def continues_output(self) -> bool:
        return self.continues

    @property
    def guards_dialogue(self) -> bool:
        return self.guards

    def extend(self, outputs: Iterable[str], npc_id: str | None = None) -> None:
        if npc_id is None:
            if self._shared is None:
                raise ValueError("this script is per NPC: name the npc_id")
            self._shared.extend(outputs)
        else:
            self._per_npc.setdefault(npc_id, deque()).extend(outputs)

    @property
    def stops_when_told(self) -> bool:
        return True

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        """The scripted text in pieces of `STREAM_PIECE_CHARS`, as a model would decode it: with
        `latency_s`, spread over the pieces (unless the request's timeout cuts it first), so a
        stop asked for mid-line ends the wait there."""
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms is not None else None
        spread = request.purpose == "dialogue" and self.latency_s > 0 and (timeout_s is None or timeout_s >= self.latency_s)
        whole = self._scripted(request, wait=False) if spread else self.generate(request)
        text = whole.text
        ends = range(STREAM_PIECE_CHARS, len(text) + STREAM_PIECE_CHARS, STREAM_PIECE_CHARS)
        for end in ends:
            if spread and self._closed.wait(self.latency_s / len(ends)):
                raise BackendError("the scripted backend was closed during a generation")
            if not observe(text[:end]):
                shown = text[: min(end, len(text))]
                if end >= len(text):
                    return whole  # stopped on the last piece: the model had finished anyway
                return whole.model_copy(
                    update={"text": shown, "tokens_generated": max(1, len(shown) // 4), "finish_reason": "aborted"}
                )
        return whole

    def generate(self, request: GenerationRequest) -> Generation:
        return self._scripted(request, wait=True)

    def _scripted(self, request: GenerationRequest, *, wait: bool) -> Generation:
        """The next scripted output; `wait`: take `latency_s` first, as a model would."""
        if not self.cycle:
            self.requests.append(request)
        if request.purpose == "judge":
            if not self._judge:
                raise BackendUnavailable("no scripted judge output")
            text = self._judge.popleft()
        else:
            queue = self._shared if self._shared is not None else self._per_npc.get(request.npc_id)
            if not queue:
                raise ScriptExhausted(f"no scripted output left for {request.npc_id!r}")
            text = queue.popleft()
            if self.cycle:
                queue.append(text)
            if self.latency_s > 0 and wait:
                self._take_time(request)
            if self.continues:
                text = request.output_prefix + text
        return Generation(
            text=text,
            tokens_evaluated=len(request.prompt.full) // 4,
            tokens_generated=max(1, len(text) // 4),
        )

    def _take_time(self, request: GenerationRequest) -> None:
        """Wait `latency_s`, or until the request's timeout or `close`, whichever comes first."""
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms is not None else None
        if self._closed.wait(self.latency_s if timeout_s is None else min(self.latency_s, timeout_s)):
            raise BackendError("the scripted backend was closed during a generation")
        if timeout_s is not None and timeout_s < self.latency_s:
            raise BackendTimeout(f"the scripted line takes {self.latency_s:g} s: cut at its deadline after {timeout_s:g} s")

    def fingerprint(self) -> ModelFingerprint:
        return ModelFingerprint(backend=self.name, file_name="", header_sha256=sha256_hex(b"scripted"))

    def close(self) -> None:
        """Ends any latency being waited out (`BackendError`), as closing a model ends its calls."""
        self._closed.set()

    def special_tokens(self) -> tuple[str, ...]:
        return self._special_tokens
