"""The batched engine's disk tier: an owner's prompt state saved on disk (`prompt_states`) loaded
into a sequence, and what the engine evaluated of a prompt written there for the next launch."""

from __future__ import annotations

import logging
from array import array

from loreguard.server.inference.engine_steps import EngineJob
from loreguard.server.inference.llama_native import NativeContext, NativeError
from loreguard.server.inference.prompt_states import PromptState, PromptStateStore
from loreguard.server.inference.sequences import Sequence

_log = logging.getLogger("loreguard.prompt_states")


def load_saved(ctx: NativeContext, disk: PromptStateStore, job: EngineJob, seq: Sequence, held: int) -> int:
    """Load the job owner's saved state into the empty `seq` when it gives more of the prompt
    than the `held` tokens memory already has, keeping the part it shares; how many (0: none,
    and `seq` is left empty)."""
    if held >= max(job.prefix_len, 1):
        return 0
    limit = len(job.prompt) - (0 if job.warm else 1)  # a generation needs its last token's logits
    saved, n = disk.find(job.owner, job.prompt[:limit], prefix=job.prefix_len)
    if saved is None or n <= held:
        return 0
    try:
        ctx.load_sequence(saved.state, seq.seq_id)
    except NativeError as exc:  # too few free cells now, or a state llama.cpp cannot read
        ctx.seq_remove(seq.seq_id)
        _log.info("prompt state of %s not loaded (%s); evaluating it", job.owner, exc)
        return 0
    ctx.seq_remove(seq.seq_id, n)
    disk.loaded()
    job.restored = n
    return n


def save_evaluated(ctx: NativeContext, disk: PromptStateStore, job: EngineJob) -> None:
    """Keep the job's sequence for the next launch when the engine evaluated its prompt here: a
    warm-up that evaluated anything, a generation that found less than its static prefix."""
    if job.seq is None or (job.warm and not job.evaluated) or (not job.warm and job.reused >= job.prefix_len):
        return
    state = ctx.save_sequence(job.seq.seq_id)
    disk.save(PromptState(owner=job.owner, tokens=array("i", job.seq.tokens), state=state, maker=disk.maker))
