"""What the batched engine (`batch_engine`) works on: a job, and the batch of one step.

A step's batch holds one row per generation that is decoding (its last sampled token, and the
tokens the grammar forces after it), then
prompt tokens of jobs still prefilling, chunked (`prefill_chunk` a step while others decode or a
warm-up runs), generations' own prompts before a warm-up's. Building it reads the jobs and
changes none of them: the engine applies the plan after `llama_decode` succeeded.
"""

from __future__ import annotations

import threading
from array import array
from dataclasses import dataclass, field

from loreguard.server.inference.llama_native import NativeError
from loreguard.server.inference.sampling import TokenSampler
from loreguard.server.inference.sequences import Sequence


class EngineClosed(NativeError):
    """The engine was shut down before the generation finished."""


class EngineTimeout(NativeError):
    """The generation ran past its deadline and was stopped (its slot is free again)."""


@dataclass
class EngineJob:
    owner: str
    prompt: array
    #: None for a warm-up, which evaluates its prompt and samples nothing.
    sampler: TokenSampler | None
    max_tokens: int
    #: perf_counter() when the caller asked; TTFT counts from here (queueing included).
    started: float
    #: perf_counter() past which the job is stopped with `EngineTimeout`; None: no limit.
    deadline: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None
    #: Streaming: set by the engine whenever `out` grew or the job ended (the caller clears it).
    grew: threading.Event | None = None
    #: Set by the caller to stop the generation; the engine ends it (`finish` `aborted`) before
    #: its next step, freeing its slot.
    cancel: bool = False
    # Filled in by the engine thread.
    seq: Sequence | None = None
    reused: int = 0
    #: Next prompt index to evaluate.
    pos: int = 0
    next_token: int | None = None
    #: Tokens the grammar forces after `next_token` (`TokenSampler.forced_run`): decoded with it
    #: in one step, the job's logits read after the last.
    forced_next: list[int] = field(default_factory=list)
    #: Steps this job had a token to decode and no room in the batch (it goes first next step).
    deferred: int = 0
    #: `llama_decode` calls this job took part in (prompt chunks and output steps).
    decodes: int = 0
    out: bytearray = field(default_factory=bytearray)
    generated: int = 0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    finish: str = "length"
    #: Warm-ups: prompt tokens evaluated, and times it gave way to a generation.
    #: `alongside`: it may run beside generations that are decoding, not only in idle time.
    alongside: bool = False
    evaluated: int = 0
    yielded: int = 0
    #: The prompt's static prefix (the part worth keeping on disk), and the prompt tokens loaded
    #: from a state saved there.
    prefix_len: int = 0
    restored: int = 0

    @property
    def prefilling(self) -> bool:
        return self.pos < len(self.prompt)

    @property
    def warm(self) -> bool:
        return self.sampler is None


@dataclass
class StepBatch:
    """One `llama_decode`'s rows: token, position, sequence and whether its logits are wanted,
    and the plan: (job, tokens it put in the batch, batch row of its logits or -1)."""

    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    seq_ids: list[int] = field(default_factory=list)
    logits: list[bool] = field(default_factory=list)
    plan: list[tuple[EngineJob, int, int]] = field(default_factory=list)
    #: Generations that put their next token in this batch, and those it had no room for (a
    #: long forced run among many rows): they go first next step (`EngineJob.deferred`).
    decoding: int = 0
    deferred: list[EngineJob] = field(default_factory=list)

    @classmethod
    def of(cls, active: list[EngineJob], n_batch: int, prefill_chunk: int) -> StepBatch:
        batch = cls()
        decoding = sorted((job for job in active if job.next_token is not None), key=lambda j: -j.deferred)
        for job in decoding:
            row = [job.next_token, *job.forced_next]
            if len(batch.tokens) + len(row) > n_batch:  # a long forced run among many rows: next step
                batch.deferred.append(job)
                continue
            batch.add(job, row, True)  # type: ignore[arg-type]
            batch.decoding += 1
        room = n_batch - len(batch.tokens)
        if decoding or any(job.warm for job in active):
            room = min(room, prefill_chunk)
        # generations' own prompts first: a warm-up only takes the room they leave
        for job in sorted(active, key=lambda j: j.warm):
            if room <= 0:
                break
            if job.prefilling:
                chunk = job.prompt[job.pos : job.pos + room].tolist()
                batch.add(job, chunk, not job.warm and job.pos + len(chunk) == len(job.prompt))
                room -= len(chunk)
        return batch

    def add(self, job: EngineJob, chunk: list[int], sample: bool) -> None:
        assert job.seq is not None
        start = len(job.seq.tokens)
        for i, token in enumerate(chunk):
            self.tokens.append(token)
            self.positions.append(start + i)
            self.seq_ids.append(job.seq.seq_id)
            self.logits.append(sample and i == len(chunk) - 1)
        self.plan.append((job, len(chunk), len(self.tokens) - 1 if sample else -1))
