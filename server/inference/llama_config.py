"""`LlamaCppConfig`: how the in-process llama.cpp backend loads its model and samples, as a
frozen value the CLI, the catalogue's settings and the receipts share."""

from __future__ import annotations

import os

from pydantic import Field

from loreguard.schemas.base import FrozenModel
from loreguard.server.inference.llama_native import MAX_SEQUENCES


def default_threads() -> int:
    """One core fewer than the machine has (at least one): the game keeps a core to itself."""
    return max(1, (os.cpu_count() or 2) - 1)


class LlamaCppConfig(FrozenModel):
    #: A GGUF file; None means the embedded default model.
    model_path: str | None = None
    #: The longest one generation may be: prompt plus output, in tokens.
    n_ctx: int = Field(default=8192, ge=256)
    n_batch: int = Field(default=512, ge=8)
    #: None: one fewer than the CPU count.
    n_threads: int | None = Field(default=None, ge=1)
    #: Layers to offload to the GPU; -1 offloads all. Needs a Vulkan, CUDA or Metal build.
    n_gpu_layers: int = Field(default=0, ge=-1)
    #: Where the model runs: `auto` (the first GPU when layers are offloaded, else the CPU),
    #: `cpu`, or a device such as `vulkan:0` or `cuda:1` (devices.py).
    device: str = "auto"
    #: A built-in name (`chatml`, `gemma`) or Jinja source; None uses the template in the GGUF.
    chat_template: str | None = None
    temperature: float = Field(default=0.7, ge=0)
    top_k: int = Field(default=40, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    #: Repetition penalties over the last `repeat_last_n` generated tokens (0: off), and DRY over
    #: the last `dry_last_n` (0: off): on by default with mild values that suit a short spoken
    #: line, where a loop is the commonest failure of a small model (`loreguard bench quality`
    #: measures both settings). Recorded in every receipt with the seed.
    repeat_last_n: int = Field(default=64, ge=-1)
    repeat_penalty: float = Field(default=1.1, gt=0)
    frequency_penalty: float = Field(default=0.0)
    presence_penalty: float = Field(default=0.0)
    dry_multiplier: float = Field(default=0.8, ge=0)
    dry_base: float = Field(default=1.75, gt=1)
    dry_allowed_length: int = Field(default=2, ge=1)
    dry_last_n: int = Field(default=256, ge=-1)
    #: Token texts that end a generation besides the GGUF's end-of-generation tokens (a
    #: catalogue model's stop tokens); each must be one token of the vocabulary.
    stop_tokens: tuple[str, ...] = ()
    #: Host memory for saved KV states, least recently used dropped past it: the batched engine's
    #: spill tier for sequences it evicts, the reproducible engine's saved NPC prefixes. 0: none.
    prefix_cache_bytes: int = Field(default=512 << 20, ge=0)
    #: A folder where NPCs' evaluated prompts are kept across launches (`prompt_states`; the
    #: sidecar's is DATA/prompt-cache), bounded by `prompt_cache_mib`. None: nothing on disk.
    prompt_cache_dir: str | None = None
    prompt_cache_mib: int = Field(default=1024, ge=1)
    #: Folders of prompt states shipped with a game (`loreguard warm`), read after the cache.
    shipped_prompts: tuple[str, ...] = ()
    #: One generation at a time with numerics independent of anything else running (tests, live
    #: replay); False runs the batched engine.
    reproducible: bool = False
    #: Tokens the output grammar forces (JSON keys, punctuation, the rest of an enum value) are
    #: decoded with the token before them in one step instead of one step each (`forced_run`).
    fast_forward: bool = True
    #: Batched engine: generations decoded together (different NPCs talking at once). None: 8
    #: with GPU offload; 1 on the CPU, where a decode step is compute-bound and batching adds
    #: little throughput but makes every NPC in the batch wait for all (docs/engine.md).
    parallel: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES // 2)
    #: Batched engine: finished sequences kept in the KV cache for prefix reuse (about one per
    #: NPC in the rotation), least recently used dropped first.
    resident_sequences: int = Field(default=32, ge=0, le=MAX_SEQUENCES // 2)
    #: Batched engine: KV cache memory in MiB, shared by every sequence (prefixes shared between
    #: sequences are stored once). None: 2048 with GPU offload, 512 on the CPU.
    kv_budget_mib: int | None = Field(default=None, ge=16)
    #: Batched engine: prompt tokens a newcomer evaluates per step while others are decoding.
    prefill_chunk: int = Field(default=128, ge=1)
