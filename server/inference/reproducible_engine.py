"""The reproducible engine: one generation at a time, numerics independent of anything else.

Used for tests and live replay, where the same prompt and seed must give the same text in any
process. Every generation takes the same path, whatever is cached:

1. put the NPC's static prefix in the KV cache: restore its saved state (in memory, or on disk
   from an earlier launch: `prompt_states`), or evaluate it from an empty cache and save the
   state for next time (in memory and on disk);
2. evaluate the rest of the prompt (and the output's given start) in fixed batches;
3. sample with the request's seeded, grammar-constrained sampler.

Because step 1 always leaves the cache holding exactly the prefix, evaluated the same way, the
same prompt and seed give the same text whether the prefix came from the cache or not, after
any number of other NPCs' turns, and in another process.

A warm-up does step 1 for the NPC's prefix between generations, giving way to any generation
that asks meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from collections.abc import Callable

from loreguard.server.inference.base import BackendError, BackendTimeout, Observer, WarmResult
from loreguard.server.inference.engine import EngineOutput, EngineRequest, PromptTokens, decode_prefix, finish_reason
from loreguard.server.inference.llama_native import NativeContext, NativeError, NativeModel
from loreguard.server.inference.prefix_cache import PrefixCache, PrefixState
from loreguard.server.inference.prompt_states import PromptState, PromptStateStore

_log = logging.getLogger("loreguard.prompt_states")


class ReproducibleEngine:
    """One context, one generation at a time; saved prefixes per NPC in `prefix_cache`."""

    def __init__(
        self, model: NativeModel, ctx: NativeContext, prefix_cache: PrefixCache, disk: PromptStateStore | None = None
    ) -> None:
        self._model = model
        self._ctx = ctx
        self.prefix_cache = prefix_cache
        #: Prompts evaluated in earlier launches (None: nothing kept on disk).
        self.disk = disk
        self._lock = threading.Lock()
        #: Generations waiting for or holding `_lock`; a warm-up waits for 0.
        self._demand = 0
        self._idle = threading.Condition()
        self._closed = False

    @property
    def max_concurrency(self) -> int:
        return 1

    @property
    def resident_prefixes(self) -> int:
        return self.prefix_cache.stats.entries

    def generate(self, request: EngineRequest, observe: Observer | None) -> EngineOutput:
        with self._idle:
            self._demand += 1
        try:
            with self._lock:
                try:
                    return self._generate(request, observe)
                except NativeError as exc:
                    # The cache may hold a half-written sequence: start the next call from scratch.
                    self._ctx.clear()
                    raise BackendError(str(exc)) from exc
        finally:
            request.sampler.close()
            with self._idle:
                self._demand -= 1
                self._idle.notify_all()

    def _generate(self, request: EngineRequest, observe: Observer | None) -> EngineOutput:
        """Holding the context: the timeout and TTFT count from here, not from the wait for
        another NPC's generation to finish."""
        started = time.perf_counter()
        deadline = request.deadline(started)

        def in_time() -> bool:  # asked between chunks of prefill: a long prompt is cut too
            return deadline is None or time.perf_counter() <= deadline

        tokens, sampler = request.tokens, request.sampler
        evaluated = self._load_prefix(request.npc_id, tokens, in_time)
        cached = len(tokens.prefix) - evaluated
        if not self._ctx.evaluate(tokens.suffix + request.forced, proceed=in_time):
            raise BackendTimeout("the generation ran past its deadline during its prompt")
        evaluated += len(tokens.suffix) + len(request.forced)
        prompt_decodes = -(-(len(tokens.suffix) + len(request.forced)) // self._ctx.n_batch)

        out = bytearray(request.output_prefix)
        generated = decodes = 0
        finish: str = "length"
        ttft_ms = 0.0
        while generated < request.max_tokens:
            if deadline is not None and time.perf_counter() > deadline:
                raise BackendTimeout(f"the generation ran past its deadline after {generated} tokens")
            token = sampler.sample(self._ctx)
            if generated == 0:
                ttft_ms = (time.perf_counter() - started) * 1000
            generated += 1
            if self._model.is_end_of_generation(token):
                finish = "stop"
                break
            # The tokens the grammar forces after it go in with it: one decode, not one each.
            run = [token] + sampler.forced_run(request.max_tokens - generated)
            ended = next((i for i, t in enumerate(run) if self._model.is_end_of_generation(t)), None)
            generated += len(run) - 1
            for t in run[:ended]:
                out += self._model.piece(t)
            if observe is not None and not observe(decode_prefix(bytes(out))):
                finish = "aborted"
                break
            if ended is not None:
                finish = "stop"
                break
            self._ctx.evaluate(run)
            decodes += 1
        return EngineOutput(
            text=out.decode("utf-8", "replace"),
            tokens_evaluated=evaluated,
            tokens_cached=cached,
            tokens_generated=generated,
            finish_reason=finish_reason(finish),
            ttft_ms=ttft_ms,
            total_ms=(time.perf_counter() - started) * 1000,
            full_filters=sampler.full_filters,
            tokens_forced=sampler.forced_tokens,
            decode_calls=prompt_decodes + decodes,
        )

    def _load_prefix(self, npc_id: str, tokens: PromptTokens, in_time: Callable[[], bool]) -> int:
        """Leave exactly the NPC's prefix in the KV cache; return how many tokens were evaluated.
        `BackendTimeout` when `in_time` turns False between chunks (nothing is saved)."""
        key = tokens.prefix_key
        cached = self.prefix_cache.get(npc_id, key)
        if cached is not None:
            self._ctx.restore_sequence(cached.state, cached.n_tokens)
            return 0
        if self._restore_from_disk(npc_id, tokens):
            return 0
        self._ctx.clear()
        if not self._ctx.evaluate(tokens.prefix, proceed=in_time):
            self._ctx.clear()
            raise BackendTimeout("the generation ran past its deadline during its prompt")
        state = self._ctx.save_sequence()
        self.prefix_cache.put(npc_id, PrefixState(key=key, n_tokens=len(tokens.prefix), state=state))
        self._save_to_disk(npc_id, tokens.prefix, state)
        return len(tokens.prefix)

    def _restore_from_disk(self, npc_id: str, tokens: PromptTokens) -> bool:
        """Leave the NPC's prefix in the cache from a state an earlier launch saved, made this
        engine's way (`PromptStateStore.find_exact`), and keep it in memory too; False if none."""
        entry = self.disk.find_exact(npc_id, tokens.prefix) if self.disk is not None else None
        if entry is None:
            return False
        try:
            self._ctx.restore_sequence(entry.state, len(entry.tokens))
        except NativeError as exc:  # llama.cpp refused it: another model shape, too few cells
            self._ctx.clear()
            _log.warning("prompt state of %s not loaded: llama.cpp refused it (%s); evaluating it again", npc_id, exc)
            return False
        self._ctx.keep_first(len(tokens.prefix))
        assert self.disk is not None
        self.disk.loaded()
        state = self._ctx.save_sequence() if len(entry.tokens) > len(tokens.prefix) else entry.state
        self.prefix_cache.put(npc_id, PrefixState(key=tokens.prefix_key, n_tokens=len(tokens.prefix), state=state))
        return True

    def _save_warm_to_disk(self, npc_id: str, tokens: PromptTokens, state: bytes) -> None:
        """The warmed prefix on disk, with the rest of the prompt up to the new message evaluated
        after it when nobody waits: the batched engine that loads the file then has nothing left
        to evaluate (this engine keeps only the prefix of it)."""
        if self.disk is None:
            return
        if tokens.suffix and self._ctx.evaluate(tokens.suffix, proceed=lambda: self._demand == 0):
            self._save_to_disk(npc_id, tokens.prefix, self._ctx.save_sequence(), head=tokens.suffix)
        else:
            self._save_to_disk(npc_id, tokens.prefix, state)

    def _save_to_disk(self, npc_id: str, prefix: list[int], state: bytes, *, head: list[int] | None = None) -> None:
        if self.disk is not None:
            tokens = array("i", prefix + (head or []))
            self.disk.save(PromptState(owner=npc_id, tokens=tokens, state=state, maker=self.disk.maker, exact=len(prefix)))

    def warm(self, npc_id: str, tokens: PromptTokens, *, alongside: bool = False) -> WarmResult:
        """Step 1 for the NPC's prefix, between generations: evaluated from an empty cache in the
        same `n_batch` chunks as a generation would, so the saved state is the one its first
        turn would have saved. A generation asking meanwhile takes the context after the current
        chunk; the warm-up then starts again once it is idle. (Only the prefix: what follows it
        is evaluated again by every generation here.)"""
        try:
            return self._warm(npc_id, tokens)
        except NativeError as exc:
            raise BackendError(str(exc)) from exc

    def _warm(self, npc_id: str, tokens: PromptTokens) -> WarmResult:
        key, n = tokens.prefix_key, len(tokens.prefix)
        yielded = 0
        while True:
            with self._idle:
                while self._demand:
                    self._idle.wait()
            with self._lock:
                if self._closed:
                    raise BackendError("the backend is closed")
                if self.prefix_cache.peek(npc_id, key):
                    return WarmResult(outcome="already", tokens=n, yielded=yielded)
                if self._restore_from_disk(npc_id, tokens):
                    return WarmResult(outcome="warmed", tokens=n, tokens_restored=n, yielded=yielded)
                self._ctx.clear()
                if not self._ctx.evaluate(tokens.prefix, proceed=lambda: self._demand == 0):
                    self._ctx.clear()
                    yielded += 1
                    continue
                state = self._ctx.save_sequence()
                if not self.prefix_cache.has_room(npc_id, len(state)):
                    return WarmResult(outcome="no_room", tokens=n, tokens_evaluated=n, yielded=yielded)
                self.prefix_cache.put(npc_id, PrefixState(key=key, n_tokens=n, state=state))
                self._save_warm_to_disk(npc_id, tokens, state)
                return WarmResult(outcome="warmed", tokens=n, tokens_evaluated=n, yielded=yielded)

    def invalidate(self, npc_id: str) -> bool:
        with self._lock:
            return self.prefix_cache.invalidate(npc_id)

    def close(self) -> None:
        """Stop taking work and free the context (the model is the backend's to free)."""
        self._closed = True
        with self._lock:
            self._ctx.close()
        if self.disk is not None:
            self.disk.close()
