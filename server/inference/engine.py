"""The small interface between the llama.cpp backend and its two engines.

The backend (`llama_backend`) does everything both engines share: it renders and tokenizes the
prompt, compiles the output grammar, builds the seeded sampler and counts what was done. An
engine only runs the tokens: the batched engine (`batch_adapter`, over `batch_engine`) decodes
many generations in one batch; the reproducible engine (`reproducible_engine`) runs one at a
time with numerics independent of anything else.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from typing import Literal, Protocol

from loreguard.server.inference.base import Observer, WarmResult
from loreguard.server.inference.sampling import TokenSampler


@dataclass(frozen=True)
class PromptTokens:
    """A rendered prompt as token ids: the static prefix and what follows it, tokenized apart so
    the prefix never depends on the suffix (which is what makes it cacheable)."""

    prefix: list[int]
    suffix: list[int]

    @property
    def prefix_key(self) -> str:
        return hashlib.sha256(array("i", self.prefix).tobytes()).hexdigest()


@dataclass(frozen=True)
class EngineRequest:
    """One generation as an engine runs it. The engine owns `sampler` from here on and closes it."""

    npc_id: str
    tokens: PromptTokens
    #: Tokens of the output's given start, evaluated after the prompt (already accepted by
    #: `sampler`), and their text, which the output starts with.
    forced: list[int]
    output_prefix: bytes
    sampler: TokenSampler
    #: Tokens the engine may sample (the cap less the given start).
    max_tokens: int
    #: perf_counter() when the caller asked.
    started: float
    #: How long the generation may take (`GenerationRequest.timeout_ms`); None: no limit. Each
    #: engine says from when it counts, and TTFT counts from the same moment.
    timeout_s: float | None

    def deadline(self, counted_from: float) -> float | None:
        """perf_counter() past which the generation is stopped; None: no limit."""
        return counted_from + self.timeout_s if self.timeout_s is not None else None


@dataclass(frozen=True)
class EngineOutput:
    text: str
    tokens_evaluated: int
    tokens_cached: int
    tokens_generated: int
    finish_reason: FinishReason
    ttft_ms: float
    total_ms: float
    #: Times the grammar sampler filtered the whole vocabulary (the backend's stats).
    full_filters: int
    #: Output tokens the grammar forced, written without sampling (`TokenSampler.forced_run`),
    #: and the model calls (`llama_decode`) of the output: one for the prompt, one per step after.
    tokens_forced: int = 0
    decode_calls: int = 0


FinishReason = Literal["stop", "length", "aborted"]


def finish_reason(finish: str) -> FinishReason:
    """An engine's own ending as a `Generation.finish_reason`: anything but a stop or an abort
    ran out of tokens."""
    return "stop" if finish == "stop" else "aborted" if finish == "aborted" else "length"


class Engine(Protocol):
    """What the backend asks of an engine. Errors are `BackendError`s."""

    @property
    def max_concurrency(self) -> int:
        """Generations run at once."""
        ...

    @property
    def resident_prefixes(self) -> int:
        """NPCs whose prompts are cached."""
        ...

    def generate(self, request: EngineRequest, observe: Observer | None) -> EngineOutput:
        """Run one generation; with `observe`, show it the text as it grows (False stops it)."""
        ...

    def warm(self, npc_id: str, tokens: PromptTokens, *, alongside: bool = False) -> WarmResult:
        """Put `tokens` (the NPC's prompt up to its new message) in the cache in idle time
        (`alongside`: also beside generations decoding, where the engine batches them)."""
        ...

    def invalidate(self, npc_id: str) -> bool:
        """Forget what is cached of the NPC's prompts; whether there was anything."""
        ...

    def close(self) -> None: ...


def decode_prefix(out: bytes) -> str:
    """Text of a growing UTF-8 output: a character whose bytes have not all arrived waits."""
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(out) - 3 and exc.reason == "unexpected end of data":
            return out[: exc.start].decode("utf-8", "replace")
        return out.decode("utf-8", "replace")
