"""A backend wrapper that keeps every request and generation: benchmarks and tests read them."""

from __future__ import annotations

from loreguard.schemas.prompt import Prompt
from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.inference.base import Generation, GenerationRequest, InferenceBackend, Observer, WarmResult


class RecordingBackend(InferenceBackend):
    """Forwards to `inner` and appends each `(request, generation)` to `calls`."""

    def __init__(self, inner: InferenceBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[GenerationRequest, Generation]] = []

    @property
    def max_concurrency(self) -> int:
        return self.inner.max_concurrency

    @property
    def continues_output(self) -> bool:
        return self.inner.continues_output

    @property
    def guards_dialogue(self) -> bool:
        return self.inner.guards_dialogue

    def generate(self, request: GenerationRequest) -> Generation:
        generation = self.inner.generate(request)
        self.calls.append((request, generation))  # list.append is atomic: safe from many threads
        return generation

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        generation = self.inner.generate_streaming(request, observe)
        self.calls.append((request, generation))
        return generation

    def warm(self, npc_id: str, prompt: Prompt, *, alongside: bool = False) -> WarmResult:
        return self.inner.warm(npc_id, prompt, alongside=alongside)

    def fingerprint(self) -> ModelFingerprint:
        return self.inner.fingerprint()

    def special_tokens(self) -> tuple[str, ...]:
        return self.inner.special_tokens()

    def sampling(self) -> dict[str, float | int]:
        return self.inner.sampling()
