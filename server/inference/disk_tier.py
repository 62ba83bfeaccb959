"""The batched engine's disk tier: an owner's prompt state saved on disk (`prompt_states`) loaded
into a sequence, and what the engine evaluated of a prompt written there for the next launch: a
prompt it had to evaluate as it goes, and at shutdown each NPC's conversation as far as it got."""

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
    disk.known[job.owner] = len(saved.tokens)
    job.restored = n
    return n


def save_evaluated(ctx: NativeContext, disk: PromptStateStore, job: EngineJob) -> None:
    """Keep the job's sequence for the next launch when the engine evaluated its prompt here: a
    warm-up that evaluated anything, a generation that found less than its static prefix."""
    if job.seq is None or (job.warm and not job.evaluated) or (not job.warm and job.reused >= job.prefix_len):
        return
    state = ctx.save_sequence(job.seq.seq_id)
    disk.save(PromptState(owner=job.owner, tokens=array("i", job.seq.tokens), state=state, maker=disk.maker))
    disk.known[job.owner] = len(job.seq.tokens)


def save_conversations(ctx: NativeContext, disk: PromptStateStore, resident: list[Sequence]) -> int:
    """At shutdown (the engine thread stopped): each owner's longest resident sequence, where it
    holds more than the owner's file, so the next launch starts where this one ended: the
    conversation so far as well as the NPC's static prompt (a repeat turn's prompt is the last
    prompt and the reply as written, then the new message). How many were written."""
    longest: dict[str, Sequence] = {}
    for seq in resident:
        if len(seq.tokens) > len(longest[seq.owner].tokens if seq.owner in longest else ()):
            longest[seq.owner] = seq
    written = 0
    for owner, seq in sorted(longest.items()):
        if len(seq.tokens) > disk.known.get(owner, 0):
            state = ctx.save_sequence(seq.seq_id)
            disk.save(PromptState(owner=owner, tokens=array("i", seq.tokens), state=state, maker=disk.maker))
            written += 1
    return written
