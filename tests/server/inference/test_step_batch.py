"""One step's batch, without a model: a decoding job's row carries the tokens the grammar forced
after its token, and a job whose row does not fit goes first in the next step."""

from __future__ import annotations

import time
from array import array

from loreguard.server.inference.engine_steps import EngineJob, StepBatch
from loreguard.server.inference.sequences import Sequence


def decoding(seq_id: int, token: int, forced: list[int], held: int = 3) -> EngineJob:
    job = EngineJob(owner=f"npc{seq_id}", prompt=array("i", range(held)), sampler=None, max_tokens=8, started=time.perf_counter())
    job.sampler = object()  # type: ignore[assignment]  # not a warm-up: StepBatch only asks whether there is one
    job.seq = Sequence(seq_id=seq_id, owner=job.owner, tokens=array("i", range(held)))
    job.pos, job.next_token, job.forced_next = held, token, forced
    return job


def test_a_forced_run_rides_in_its_tokens_row_with_logits_after_the_last() -> None:
    job = decoding(0, 7, [8, 9])
    batch = StepBatch.of([job], n_batch=16, prefill_chunk=4)
    assert batch.tokens == [7, 8, 9] and batch.positions == [3, 4, 5] and batch.logits == [False, False, True]
    assert batch.plan == [(job, 3, 2)] and batch.decoding == 1 and batch.deferred == []


def test_a_row_that_does_not_fit_waits_and_goes_first_next_step() -> None:
    first, second = decoding(0, 1, [2, 3]), decoding(1, 4, [5, 6])
    batch = StepBatch.of([first, second], n_batch=4, prefill_chunk=4)
    assert batch.tokens == [1, 2, 3] and batch.deferred == [second]
    second.deferred = 1  # what the engine counts
    again = StepBatch.of([first, second], n_batch=4, prefill_chunk=4)
    assert again.tokens == [4, 5, 6] and again.deferred == [first]
