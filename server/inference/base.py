"""Stage 6: the model behind a small interface.

A backend turns a prompt into text. It has no memory, no authority and no access to game
state: everything it returns goes through parsing and the validation gate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal, Self

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.prevention import DialogueConstraints, Prevention
from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import ModelFingerprint


class BackendError(Exception):
    """The backend could not produce an output."""


class BackendUnavailable(BackendError):
    """No model is loaded or reachable."""


class BackendTimeout(BackendError):
    """The backend ran past its deadline."""


class BackendBusy(BackendUnavailable):
    """A model server asked to wait (HTTP 429) longer than the deadline leaves."""


class GenerationRequest(FrozenModel):
    npc_id: str
    prompt: Prompt
    seed: int
    max_tokens: int = Field(default=320, ge=1)
    #: JSON Schema the output must satisfy; backends that can constrain decoding use it.
    output_schema: dict[str, Any] | None = None
    #: Why this generation is asked for: a dialogue attempt, or a semantic-judge check.
    purpose: Literal["dialogue", "judge"] = "dialogue"
    #: Give up after this long (from the call) with `BackendTimeout`; None waits for the end.
    timeout_ms: int | None = Field(default=None, ge=1)
    #: Text the output must start with, written for the model: the generation continues it (a
    #: streamed retry keeps the words the player already saw), and `Generation.text` holds it.
    #: Only for backends whose `continues_output` is True.
    output_prefix: str = ""
    #: Text the generation must not start with after `output_prefix`: its first token is refused
    #: as the first token sampled (a streamed retry does not begin again with the sentence just
    #: rejected). Only for backends whose `continues_output` is True.
    avoid_start: str = ""
    #: What the NPC said before, oldest first (its recent replies, then this interaction's
    #: rejected attempts): a sampler with DRY counts them as words already written, so a long run
    #: of one of them is penalised as a repeat within the reply would be (llama.cpp's server lets
    #: DRY see the prompt the same way). Backends without DRY ignore it.
    said_before: tuple[str, ...] = ()
    #: What the dialogue may not say (the gate's word checks, stated by the gate modules): a
    #: sampler of our own refuses a token that would break one (`dialogue_guard`). Backends
    #: without one ignore it; the gate judges every reply either way.
    constraints: DialogueConstraints = DialogueConstraints()


class Generation(FrozenModel):
    text: str
    #: Prompt tokens evaluated for this generation.
    tokens_evaluated: int = 0
    #: Prompt tokens restored from a cached prefix instead of evaluated.
    tokens_cached: int = 0
    tokens_generated: int = 0
    #: `aborted`: a streaming observer stopped the generation before the model finished.
    finish_reason: Literal["stop", "length", "aborted"] = "stop"
    #: What the sampler kept out of the dialogue (`GenerationRequest.constraints`).
    prevented: tuple[Prevention, ...] = ()
    #: Metadata, never hashed.
    ttft_ms: float = 0.0
    total_ms: float = 0.0


#: A streaming observer: the output so far; False stops the generation.
Observer = Callable[[str], bool]


class WarmResult(FrozenModel):
    """What a warm-up did (`InferenceBackend.warm`)."""

    #: `warmed`: the tokens are in the cache now; `already`: they were; `no_room`: the cache had
    #: no free room and a warm-up never evicts anything; `unsupported`: this backend keeps no
    #: cache (a remote server), nothing was done.
    outcome: Literal["warmed", "already", "no_room", "unsupported"]
    #: Prompt tokens the warm-up covers, and those it evaluated (the rest were cached).
    tokens: int = 0
    tokens_evaluated: int = 0
    #: Prompt tokens loaded from a state saved on disk (an earlier launch's, or shipped).
    tokens_restored: int = 0
    #: Times an interaction arriving made the warm-up stop and resume later.
    yielded: int = 0


class InferenceBackend(ABC):
    """One model. `generate` may be called from several threads at once; a backend that cannot
    serve calls together serialises them and says so with `max_concurrency` 1."""

    name: str = "backend"

    @property
    def max_concurrency(self) -> int:
        """Generations this backend serves at once; the sidecar runs that many interactions."""
        return 1

    @property
    def continues_output(self) -> bool:
        """Whether this backend honours `GenerationRequest.output_prefix`. A remote chat API
        cannot be made to continue a reply it did not write: the default is False."""
        return False

    @property
    def stops_when_told(self) -> bool:
        """Whether `generate_streaming` stops at its observer's word within a token or so, with
        the same output as `generate` up to there: a cancel then cuts a generation that does not
        stream. A remote server's non-streamed call runs to its end: the default is False."""
        return False

    @property
    def guards_dialogue(self) -> bool:
        """Whether this backend's sampler keeps `GenerationRequest.constraints` out of the
        dialogue (`dialogue_guard`); the pipeline builds them only for one that does."""
        return False

    @abstractmethod
    def generate(self, request: GenerationRequest) -> Generation:
        """Produce text for `request`, or raise a `BackendError`."""

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        """Like `generate`, calling `observe` with the text so far as it grows; when it returns
        False the generation stops at once (`finish_reason` `aborted`, its slot freed). A backend
        that cannot stream shows the whole text once, at the end: the default."""
        generation = self.generate(request)
        observe(generation.text)
        return generation

    def warm(self, npc_id: str, prompt: Prompt, *, alongside: bool = False) -> WarmResult:
        """Evaluate what `prompt` holds before its new message (the NPC's system message, rules
        and earlier turns: `Prompt.before_new_message`) into the backend's cache, so the NPC's
        next interaction evaluates only its new message. Blocks until done, giving way to every
        generation asked meanwhile; changes nothing but the cache. `alongside`: it may also run
        beside generations already decoding (a scene's next speaker, prefilled while the current
        line streams), where the backend batches them; otherwise only in idle time. A backend
        without a cache of its own does nothing: the default."""
        return WarmResult(outcome="unsupported")

    @abstractmethod
    def fingerprint(self) -> ModelFingerprint:
        """What model this is, for audit records and replay checks."""

    def special_tokens(self) -> tuple[str, ...]:
        """The loaded model's special (control) tokens as text: the gate fails a reply that holds
        one. A backend that cannot ask its tokenizer lists none."""
        return ()

    def sampling(self) -> dict[str, float | int]:
        """The sampler settings every generation uses besides its seed (repetition penalties,
        DRY...), as receipts record them; empty for a backend without a sampler of its own."""
        return {}

    def stalled_s(self) -> float:
        """Seconds the native call now running (one llama.cpp decode) has taken, 0.0 when none
        is: a sidecar ends itself when a GPU driver stops answering rather than hang
        (server/sidecar/watchdog.py). A backend with no native calls is never stalled."""
        return 0.0

    def close(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Release the model. Backends without resources need not override this."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
