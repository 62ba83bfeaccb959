"""The batched engine (`batch_engine`) behind the backend's engine interface (`engine.Engine`):
a generation becomes an `EngineJob` the engine thread decodes with everyone else's, and a
streamed one is watched from the caller's thread."""

from __future__ import annotations

import threading
import time
from array import array
from typing import Literal

from loreguard.server.inference.base import BackendError, BackendTimeout, Observer, WarmResult
from loreguard.server.inference.batch_engine import BatchedEngine
from loreguard.server.inference.engine import EngineOutput, EngineRequest, PromptTokens, decode_prefix, finish_reason
from loreguard.server.inference.engine_steps import EngineJob, EngineTimeout
from loreguard.server.inference.llama_native import NativeError


class BatchedEngineAdapter:
    """`Engine` over one `BatchedEngine` with `slots` generation slots."""

    def __init__(self, engine: BatchedEngine, slots: int) -> None:
        self.engine = engine
        self._slots = slots

    @property
    def max_concurrency(self) -> int:
        return self._slots

    @property
    def resident_prefixes(self) -> int:
        return len(self.engine.resident_owners())

    def generate(self, request: EngineRequest, observe: Observer | None) -> EngineOutput:
        """`observe` runs on the caller's thread, never the engine's: a slow check delays only
        this generation's stop, not the other NPCs decoding in the same batch. The timeout and
        TTFT count from when the caller asked: waiting for a slot is part of them. At the
        timeout the caller stops waiting even while the engine is inside a long step (a chunk
        of prefill on a slow CPU); the engine ends the job before its next step."""
        tokens = request.tokens
        prompt = array("i", tokens.prefix + tokens.suffix + request.forced)
        job = EngineJob(
            owner=request.npc_id, prompt=prompt, sampler=request.sampler, max_tokens=request.max_tokens,
            started=request.started, deadline=request.deadline(request.started),
            out=bytearray(request.output_prefix), prefix_len=len(tokens.prefix),
        )  # fmt: skip
        try:
            if observe is None:
                self.engine.submit(job)
                self._wait(job, job.done)
                if job.error is not None:
                    raise job.error
            else:
                self._watch(job, observe)
        except EngineTimeout as exc:
            raise BackendTimeout(str(exc)) from exc
        except NativeError as exc:
            raise BackendError(str(exc)) from exc
        return EngineOutput(
            text=job.out.decode("utf-8", "replace"),
            tokens_evaluated=len(prompt) - job.reused,
            tokens_cached=job.reused,
            tokens_generated=job.generated,
            finish_reason=finish_reason(job.finish),
            ttft_ms=job.ttft_ms,
            total_ms=job.total_ms,
            full_filters=request.sampler.full_filters,
            tokens_forced=request.sampler.forced_tokens,
            decode_calls=job.decodes,
        )

    def _watch(self, job: EngineJob, observe: Observer) -> None:
        """Run `job` on the engine, showing `observe` its text as it grows; stop it when told."""
        grew = job.grew = threading.Event()
        self.engine.submit(job)
        shown = 0
        while True:
            self._wait(job, grew)
            grew.clear()
            ended = job.done.is_set()
            out = bytes(job.out)
            if len(out) > shown and not job.cancel:
                shown = len(out)
                if not observe(decode_prefix(out)):
                    job.cancel = True
            if ended:
                break
        if job.error is not None:
            raise job.error

    @staticmethod
    def _wait(job: EngineJob, event: threading.Event) -> None:
        """Wait for `event` until the job's deadline; past it, stop the job (`EngineTimeout`)."""
        left = None if job.deadline is None else max(0.0, job.deadline - time.perf_counter())
        if not event.wait(left) and not job.done.is_set():
            job.cancel = True  # the engine frees its slot before its next step
            raise EngineTimeout(f"the generation ran past its deadline after {job.generated} tokens")

    def warm(self, npc_id: str, tokens: PromptTokens, *, alongside: bool = False) -> WarmResult:
        """The system message, rules and earlier turns evaluated into a resident sequence."""
        try:
            job = self.engine.warm(
                npc_id, array("i", tokens.prefix + tokens.suffix), alongside=alongside, prefix_len=len(tokens.prefix)
            )
        except NativeError as exc:
            raise BackendError(str(exc)) from exc
        outcome: Literal["warmed", "already", "no_room"] = (
            "warmed" if job.finish == "warmed" else "already" if job.finish == "already" else "no_room"
        )
        return WarmResult(
            outcome=outcome, tokens=len(job.prompt), tokens_evaluated=job.evaluated, tokens_restored=job.restored,
            yielded=job.yielded,
        )  # fmt: skip

    def invalidate(self, npc_id: str) -> bool:
        return self.engine.forget(npc_id) > 0

    def close(self) -> None:
        """Stop the engine thread, then free its context (the model is the backend's to free)."""
        self.engine.close()
        self.engine.ctx.close()
