"""Continuous batching: every active generation advances in one `llama_decode` per step.

One thread owns the llama.cpp context. Callers (one per interaction in flight) hand it a job
and wait; the engine admits jobs up to the slot count, and each step builds one batch:

* one row per generation that is decoding (its last sampled token), and
* prompt tokens of newcomers still prefilling, chunked (`prefill_chunk` tokens a step while
  others decode) so a long newcomer does not stall everyone else's next token.

Each job samples from its own row's logits with its own seeded, grammar-constrained sampler; a
step samples all its rows at once (`sample_rows`).
A newcomer first copies the longest prompt prefix any sequence already holds (`SequencePool`),
so a repeat turn of an NPC evaluates only what changed since its last turn. Finished sequences
stay resident for that reuse until ids or KV cells run short; then they are saved to host
memory (`SpillCache`) and copied back when a prompt matches them better than anything resident.
Below both lies the disk (`PromptStateStore`): an NPC's evaluated prompt from an earlier launch,
or shipped with the game, loaded when nothing in memory holds its static prefix; a prompt this
engine had to evaluate (a warm-up, or a first line) is written there for the next launch.

Warm-ups (`warm`): the prompt an NPC's next turn will start with, evaluated into a resident
sequence in idle time. A warm-up runs only while no generation is active or waiting, alone, a
`prefill_chunk` of tokens a step; a generation that arrives meanwhile stops it after that step
(its tokens so far stay resident) and it resumes from them once the engine is idle again. It
never evicts anything: without a free sequence id or free KV cells it ends `no_room`. A warm-up
`alongside` (a scene's next speaker) may also start while generations decode: its chunks ride
in their steps, after every generation's own prompt tokens, one warm-up at a time.

Numerics: a generation's logits depend on which cells its tokens landed in and on what else
shared its batches, so the text can differ from a solo run with the same seed. The backend's
`reproducible` setting bypasses this engine for tests and live replay.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass, field

from loreguard.server.inference.disk_tier import load_saved, save_conversations, save_evaluated
from loreguard.server.inference.engine_steps import EngineClosed, EngineJob, EngineTimeout, StepBatch
from loreguard.server.inference.llama_native import NativeContext, NativeError, NativeModel
from loreguard.server.inference.prompt_states import PromptStateStore
from loreguard.server.inference.sampling import SamplingTimes, sample_rows
from loreguard.server.inference.sequences import Sequence, SequencePool
from loreguard.server.inference.spill import SpillCache, SpilledSequence

#: llama_decode's status when no KV cells are free for the batch (nothing was changed).
_NO_KV_SLOT = 1


@dataclass
class EngineStats:
    steps: int = 0
    rows: int = 0
    #: Largest number of generations decoding in one step.
    peak_decoding: int = 0
    prompt_tokens_reused: int = 0
    #: Of those reused, the ones copied back from the spill tier.
    prompt_tokens_restored: int = 0
    #: Prompt tokens (generations' and warm-ups') loaded from states saved on disk.
    prompt_tokens_from_disk: int = 0
    prompt_tokens_evaluated: int = 0
    kv_full_evictions: int = 0
    kv_full_failures: int = 0
    #: Output tokens the grammar forced, decoded with the token before them (no step of their own).
    tokens_forced: int = 0
    #: Prompt tokens warm-ups evaluated (not in `prompt_tokens_evaluated`).
    warm_tokens_evaluated: int = 0
    #: Seconds in steps, and in their `llama_decode` calls (on a GPU the call returns before
    #: the device is done: the wait is in `sampling.logits_s`).
    step_s: float = 0.0
    decode_s: float = 0.0
    sampling: SamplingTimes = field(default_factory=SamplingTimes)

    @property
    def outside_decode_share(self) -> float:
        """The share of step time the host spent on its own work, not on the device's."""
        device = self.decode_s + self.sampling.logits_s
        return max(0.0, self.step_s - device) / self.step_s if self.step_s else 0.0


class BatchedEngine:
    def __init__(
        self,
        model: NativeModel,
        ctx: NativeContext,
        pool: SequencePool,
        *,
        prefill_chunk: int,
        spill: SpillCache | None = None,
        disk: PromptStateStore | None = None,
    ) -> None:
        self.model = model
        self.ctx = ctx
        self.pool = pool
        self.spill = spill
        self.disk = disk
        self.prefill_chunk = max(1, min(prefill_chunk, ctx.n_batch))
        self.stats = EngineStats()
        self._cond = threading.Condition()
        self._waiting: deque[EngineJob] = deque()
        self._warming: deque[EngineJob] = deque()
        self._active: list[EngineJob] = []
        self._closed = False
        #: Held for each step's native calls, so `forget` can run between steps.
        self._native = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="loreguard-engine", daemon=True)
        self._thread.start()

    # --- callers' side -------------------------------------------------------------------

    def run(self, job: EngineJob) -> EngineJob:
        """Queue `job` and wait for it to finish; raises its error, if any."""
        self.submit(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job

    def submit(self, job: EngineJob) -> None:
        """Queue `job` without waiting (a streaming caller watches `job.grew` and `job.done`)."""
        with self._cond:
            if self._closed:
                raise EngineClosed("the inference engine is shut down")
            self._waiting.append(job)
            self._cond.notify()

    def warm(self, owner: str, prompt: array, *, alongside: bool = False, prefix_len: int = 0) -> EngineJob:
        """Evaluate `prompt` into a resident sequence of `owner` in idle time (`alongside`: also
        beside generations decoding) and wait for it; the job's `finish` says how it ended:
        `warmed`, `already` (resident or spilled before) or `no_room`. Generations never wait
        for it longer than one prefill chunk."""
        job = EngineJob(
            owner=owner, prompt=prompt, sampler=None, max_tokens=0, started=time.perf_counter(), alongside=alongside,
            prefix_len=prefix_len,
        )  # fmt: skip
        with self._cond:
            if self._closed:
                raise EngineClosed("the inference engine is shut down")
            self._warming.append(job)
            self._cond.notify()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job

    def forget(self, owner: str) -> int:
        """Drop the resident sequences `owner`'s turns left behind; how many."""
        with self._native:
            dropped = self.pool.owned_by(owner)
            for seq_id in dropped:
                self.ctx.seq_remove(seq_id)
                self.pool.release(seq_id)
            spilled = 1 if self.spill is not None and self.spill.forget(owner) else 0
            return len(dropped) + spilled

    def resident_owners(self) -> list[str]:
        with self._native:
            return sorted({s.owner for s in self.pool.resident()})

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self.disk is not None:
            save_conversations(self.ctx, self.disk, self.pool.resident())
            self.disk.close()

    # --- the engine thread ---------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self._active and not self._warming:
                    self._cond.wait()
                if self._closed:
                    for job in list(self._waiting) + self._active + list(self._warming):
                        self._fail(job, EngineClosed("the inference engine shut down"))
                    self._waiting.clear()
                    self._warming.clear()
                    return
                # A warm-up gives way to any generation waiting, and starts only when idle.
                paused = [job for job in self._active if job.warm] if self._waiting else []
                warming = None
                if not self._waiting and self._warming and (not self._active or self._may_warm_alongside()):
                    warming = self._warming.popleft()
                admitted: list[EngineJob] = []
                while self._waiting and len(self._active) - len(paused) + len(admitted) < self.pool.max_active:
                    admitted.append(self._waiting.popleft())
            with self._native:
                for job in paused:
                    self._pause(job)
                if warming is not None:
                    self._admit_warm(warming)
                now = time.perf_counter()
                for job in admitted:
                    if job.deadline is not None and now > job.deadline:
                        self._fail(job, EngineTimeout("the generation's deadline passed while it was queued"))
                    else:
                        self._admit(job)
                for job in [j for j in self._active if j.cancel]:
                    self._finish(job, "aborted")
                for job in [j for j in self._active if j.deadline is not None and now > j.deadline]:
                    self._fail(job, EngineTimeout(f"the generation ran past its deadline after {job.generated} tokens"))
                if self._active:
                    started = time.perf_counter()
                    self._step()
                    self.stats.step_s += time.perf_counter() - started

    def _may_warm_alongside(self) -> bool:
        """The next warm-up may join the generations decoding: it asked to, and no other warm-up
        is running (one at a time keeps a step's extra rows to one prefill chunk)."""
        return self._warming[0].alongside and not any(job.warm for job in self._active)

    def _admit(self, job: EngineJob) -> None:
        # Reuse at most all but the last prompt token: sampling needs that token's logits.
        limit = len(job.prompt) - 1
        match = self.pool.longest_match(job.prompt, limit=limit)
        spilled, n_spilled = self.spill.best_match(job.prompt, limit=limit) if self.spill else (None, 0)
        seq, evicted = self.pool.acquire(job.owner, keep=match.seq_id)
        if evicted is not None:
            self._evict(evicted)
        self.ctx.seq_remove(seq.seq_id)
        reused = self._from_disk(job, seq, max(match.n_tokens, n_spilled))
        if not reused and spilled is not None and n_spilled > match.n_tokens:
            reused = self._restore(spilled, seq, n_spilled, keep=match.seq_id)
            self.stats.prompt_tokens_restored += reused
        if reused == 0 and match.seq_id is not None:
            self.ctx.seq_copy(match.seq_id, seq.seq_id, match.n_tokens)
            if self.pool.get(match.seq_id).owner == job.owner:
                # Recency follows the NPC's own turns; another NPC sharing a few template
                # tokens must not keep a sequence from being evicted.
                self.pool.touch(match.seq_id)
            reused = match.n_tokens
        seq.tokens = array("i", job.prompt[:reused])
        job.seq, job.reused, job.pos = seq, reused, reused
        self.stats.prompt_tokens_reused += reused
        self._active.append(job)

    def _admit_warm(self, job: EngineJob) -> None:
        """Start (or resume) a warm-up from the longest resident match, without evicting."""
        match = self.pool.longest_match(job.prompt, limit=len(job.prompt))
        _, n_spilled = self.spill.best_match(job.prompt, limit=len(job.prompt)) if self.spill else (None, 0)
        if max(match.n_tokens, n_spilled) >= len(job.prompt):
            self._end_warm(job, "warmed" if job.evaluated else "already")
            return
        if not self.pool.has_resident_room():
            self._end_warm(job, "no_room")
            return
        seq, _ = self.pool.acquire(job.owner)
        self.ctx.seq_remove(seq.seq_id)
        reused = self._from_disk(job, seq, match.n_tokens)
        if reused == len(job.prompt):
            seq.tokens = array("i", job.prompt)
            job.seq, job.reused, job.pos = seq, reused, reused
            self._active.append(job)
            self._end_warm(job, "warmed")
            return
        if reused == 0 and match.seq_id is not None:
            self.ctx.seq_copy(match.seq_id, seq.seq_id, match.n_tokens)
            held = self.pool.get(match.seq_id)
            if held.owner == job.owner and not held.active and len(held.tokens) == match.n_tokens:
                # This warm-up's own earlier part (it gave way): the new sequence supersedes it.
                self.ctx.seq_remove(match.seq_id)
                self.pool.release(match.seq_id)
            reused = match.n_tokens
        seq.tokens = array("i", job.prompt[:reused])
        job.seq, job.reused, job.pos = seq, reused, reused
        self._active.append(job)

    def _pause(self, job: EngineJob) -> None:
        """A generation is waiting: keep the warm-up's tokens so far resident, resume it later."""
        assert job.seq is not None
        self.pool.finish(job.seq.seq_id)
        self._active.remove(job)
        job.seq = None
        job.yielded += 1
        with self._cond:
            self._warming.appendleft(job)

    def _from_disk(self, job: EngineJob, seq: Sequence, held: int) -> int:
        n = load_saved(self.ctx, self.disk, job, seq, held) if self.disk is not None else 0
        self.stats.prompt_tokens_from_disk += n
        return n

    def _end_warm(self, job: EngineJob, finish: str) -> None:
        if finish == "warmed" and self.disk is not None:
            save_evaluated(self.ctx, self.disk, job)
        if job.seq is not None:
            self.pool.finish(job.seq.seq_id)
            self._active.remove(job)
        job.finish = finish
        job.total_ms = (time.perf_counter() - job.started) * 1000
        job.done.set()

    def _restore(self, spilled: SpilledSequence, seq: Sequence, n_tokens: int, *, keep: int | None) -> int:
        """Copy a spilled state back into `seq`, keeping its first `n_tokens`; 0 when the cache
        has no cells for it even after dropping resident sequences (never `keep`)."""
        assert self.spill is not None
        entry = self.spill.take(spilled.owner)
        while True:
            try:
                self.ctx.load_sequence(entry.state, seq.seq_id)
                break
            except NativeError:
                self.ctx.seq_remove(seq.seq_id)
                victim = self.pool.evict_one(keep=keep)
                if victim is None:
                    self.spill.put(entry)
                    return 0
                self._evict(victim)
        self.ctx.seq_remove(seq.seq_id, n_tokens)
        return n_tokens

    def _evict(self, victim: Sequence) -> None:
        """Free a dropped resident sequence's cells, saving its state to the spill tier first."""
        if self.spill is not None and len(victim.tokens) > 0:
            self.spill.put(SpilledSequence(victim.owner, victim.tokens, self.ctx.save_sequence(victim.seq_id)))
        self.ctx.seq_remove(victim.seq_id)

    def _step(self) -> None:
        batch = StepBatch.of(self._active, self.ctx.n_batch, self.prefill_chunk)
        tokens, plan, decoding = batch.tokens, batch.plan, batch.decoding
        for job in self._active:
            job.deferred = job.deferred + 1 if job in batch.deferred else 0
        started = time.perf_counter()
        status = self.ctx.decode(tokens, batch.positions, batch.seq_ids, batch.logits)
        self.stats.decode_s += time.perf_counter() - started
        if status == _NO_KV_SLOT:
            warm = [job for job, _, _ in plan if job.warm]
            if warm:
                # A warm-up runs alone and never evicts: it keeps what it has and ends.
                self._end_warm(warm[0], "no_room")
            else:
                self._make_room()
            return
        if status != 0:
            failed = NativeError(f"llama_decode failed with status {status}")
            for job in list(self._active):
                self._fail(job, failed)
            self.ctx.clear()
            self.pool.clear()
            return
        self.stats.steps += 1
        self.stats.rows += len(tokens)
        self.stats.peak_decoding = max(self.stats.peak_decoding, decoding)

        sampling: list[tuple[EngineJob, int]] = []
        for job, n, row in plan:
            assert job.seq is not None
            if job.prefilling:
                job.seq.tokens.extend(job.prompt[job.pos : job.pos + n])
                job.pos += n
                if job.warm:
                    job.evaluated += n
                    self.stats.warm_tokens_evaluated += n
                else:
                    self.stats.prompt_tokens_evaluated += n
            else:
                job.seq.tokens.append(job.next_token)
                job.seq.tokens.extend(job.forced_next)
                job.forced_next = []
            job.decodes += 1
            if job.warm:
                if not job.prefilling:
                    self._end_warm(job, "warmed")
            elif row >= 0:
                sampling.append((job, row))
        if sampling:
            self._sample(sampling)

    def _sample(self, sampling: list[tuple[EngineJob, int]]) -> None:
        """Every sampling row of the step at once (`sample_rows`); a row that fails fails its job."""
        rows = [(job.sampler, row) for job, row in sampling]
        tokens_chosen = sample_rows(self.ctx, rows, self.stats.sampling)  # type: ignore[arg-type]
        for (job, _), token in zip(sampling, tokens_chosen, strict=True):
            if isinstance(token, NativeError):
                self._fail(job, token)
            else:
                self._took(job, token)

    def _took(self, job: EngineJob, token: int) -> None:
        """The job's sampler chose `token`: its output grows, or it ends."""
        if job.generated == 0:
            job.ttft_ms = (time.perf_counter() - job.started) * 1000
        job.generated += 1
        if self.model.is_end_of_generation(token):
            self._finish(job, "stop")
            return
        # The tokens the grammar forces after it are decoded with it, in the same step.
        run = job.sampler.forced_run(job.max_tokens - job.generated) if job.sampler is not None else []
        ended = next((i for i, t in enumerate(run) if self.model.is_end_of_generation(t)), None)
        job.generated += len(run)
        self.stats.tokens_forced += len(run)
        for written in [token, *run[:ended]]:
            job.out += self.model.piece(written)
        if job.grew is not None:
            job.grew.set()
        if ended is not None:
            self._finish(job, "stop")
            return
        if job.generated >= job.max_tokens:
            self._finish(job, "length")
            return
        job.next_token = token
        job.forced_next = run

    def _make_room(self) -> None:
        """No KV cells for this step: drop a resident sequence, or fail the newest prefilling job."""
        evicted = self.pool.evict_one()
        if evicted is not None:
            self._evict(evicted)
            self.stats.kv_full_evictions += 1
            return
        victims = [job for job in self._active if job.prefilling] or self._active
        self.stats.kv_full_failures += 1
        self._fail(victims[-1], NativeError("the KV cache is full: raise the KV budget or lower the slots"))

    def _finish(self, job: EngineJob, reason: str) -> None:
        assert job.seq is not None
        job.finish = reason
        job.next_token = None
        job.total_ms = (time.perf_counter() - job.started) * 1000
        if reason != "aborted" and self.disk is not None:
            save_evaluated(self.ctx, self.disk, job)
        self.pool.finish(job.seq.seq_id)
        self._active.remove(job)
        if job.sampler is not None:
            job.sampler.close()
        job.done.set()
        if job.grew is not None:
            job.grew.set()

    def _fail(self, job: EngineJob, error: Exception) -> None:
        if job.seq is not None and job in self._active:
            self.ctx.seq_remove(job.seq.seq_id)
            self.pool.release(job.seq.seq_id)
        if job in self._active:
            self._active.remove(job)
        job.error = error
        if job.sampler is not None:
            job.sampler.close()
        job.done.set()
        if job.grew is not None:
            job.grew.set()
