"""`loreguard bench inference`: the real model, eight NPCs taking turns.

Eight NPCs, each with a static prefix of about 1,500 tokens (persona, world lore and canonical
facts), speak in an interleaved rotation (A, B, ... H, A, B, ...) through the full governance
pipeline. The first turn of each NPC evaluates its whole prompt (cold); later turns reuse what
is cached of the NPC's earlier turns (warm): the batched engine the longest common token prefix
with its resident sequences, the reproducible engine the saved static prefix.
Every figure is a median over one run, so ratios compare like with like: TTFT warm is each NPC's
last turn as the rotation ran it, TTFT cold the same request again with that NPC's cache
dropped; free decoding runs on the same prompts and seeds as constrained decoding.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionContext, NpcProfile, ParsedOutput, WorldDefinition
from loreguard.server.inference.base import Generation, GenerationRequest
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.inference.recording import RecordingBackend
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig

PLACES = ("the mill", "the north gate", "the river ford", "the old chapel", "the salt market", "the watchtower",
           "the tannery", "the bridge of Ald", "the granary", "the smithy", "the ferry landing", "the orchard")  # fmt: skip
_EVENTS = ("a flood", "a harvest feast", "a border skirmish", "a plague winter", "a royal visit", "a great fire",
           "a drought", "a wedding of two guild families", "a wolf hunt", "a tax revolt")  # fmt: skip
_NAMES = ("Brom", "Mira", "Tomas", "Elsa", "Garrik", "Wenna", "Osric", "Lida")
_ROLES = ("gate guard", "merchant", "miller", "priestess", "blacksmith", "ferrywoman", "tax collector", "herbalist")
_LINES = ("Good day. Who are you?", "What news from the town?", "Can you help me with something?",
          "What do you think of the king?", "Where can I find the smithy?", "Is the road north safe?")  # fmt: skip


def _fact(npc: int, i: int) -> str:
    place, event = PLACES[(npc * 7 + i) % len(PLACES)], _EVENTS[(npc * 3 + i) % len(_EVENTS)]
    return (
        f"In the year {1100 + npc * 40 + i}, {_NAMES[npc]} was at {place} during {event}, "
        f"and still remembers who helped and who ran away."
    )


def bench_profiles(n_npcs: int = 8, facts: int = 32) -> list[NpcProfile]:
    """NPCs whose static prefixes are about 1,500 tokens each with the embedded model."""
    profiles = []
    for n in range(n_npcs):
        persona = (
            f"You are {_NAMES[n % len(_NAMES)]}, the {_ROLES[n % len(_ROLES)]} of Eldmoor. You speak plainly, "
            "in short sentences, and you never mention anything from outside this world. "
        ) * 3
        profiles.append(
            NpcProfile.model_validate(
                {
                    "id": f"npc_{n}",
                    "name": f"{_NAMES[n % len(_NAMES)]} the {_ROLES[n % len(_ROLES)]}",
                    "persona": persona,
                    "canonical_facts": [{"id": f"f{n}_{i}", "text": _fact(n % len(_NAMES), i)} for i in range(facts)],
                    "bounds": {"max_chars": 40000},
                }
            )
        )
    return profiles


def bench_world() -> WorldDefinition:
    lore = (
        "Eldmoor is a walled river town ruled by King Arthur. The river Ald divides the old town from the "
        "market quarter, and the north gate closes at dusk. "
    ) * 3
    return WorldDefinition.model_validate({"id": "eldmoor", "lore": lore, "initial_state": {"weather": "rain"}})


def _decode_tok_s(g: Generation) -> float | None:
    seconds = (g.total_ms - g.ttft_ms) / 1000
    return (g.tokens_generated - 1) / seconds if g.tokens_generated > 8 and seconds > 0 else None


def strictly_valid(text: str) -> bool:
    """Whether `text` is a valid output of the schema (strict JSON, every field in bounds)."""
    try:
        ParsedOutput.model_validate_json(text)
    except ValidationError:
        return False
    return True


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else float("nan")


#: One generation as the recorder saw it: the request sent and what came back.
_Call = tuple[GenerationRequest, Generation]


@dataclass(frozen=True)
class _Rotation:
    """What the rotation left: every generation, each round's first attempts (a retry re-sends
    most of the same prompt) and the share of replies the next prompt replayed as written."""

    calls: list[_Call]
    turns: list[list[_Call]]
    verbatim: float


@dataclass(frozen=True)
class _SameRequests:
    """The last round's requests as run (warm), again with the NPC's cache dropped (cold), and
    decoded free of the grammar (tokens/s of those long enough to tell)."""

    warm: list[Generation]
    cold: list[Generation]
    free_rates: list[float]


def _rotation(recorder: RecordingBackend, npcs: int, rounds: int) -> _Rotation:
    """`rounds` turns of `npcs` NPCs, interleaved, through the full pipeline."""
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "bench.db")
        store.load_world(bench_world())
        profiles = bench_profiles(npcs)
        for profile in profiles:
            store.register_npc(profile)
        pipeline = GovernancePipeline(store, recorder, PipelineConfig())
        turns: list[list[_Call]] = []
        for round_ in range(rounds):
            turns.append([])
            for profile in profiles:
                ctx = InteractionContext(npc_id=profile.id, trigger_reason="player_utterance",
                                         player_input=_LINES[round_ % len(_LINES)])  # fmt: skip
                mark = len(recorder.calls)
                pipeline.interact(ctx)
                turns[-1].append(recorder.calls[mark])
        # How often the next prompt could replay the model's own bytes: a reply whose changes the
        # gate refused in part, or whose line hygiene rewrote, is written anew, and the engine
        # re-evaluates it.
        outputs = {generation.text for _, generation in recorder.calls}
        replies = [e.turn.reply for p in profiles for e in store.scope(p.id).episodic if e.turn is not None]
        verbatim = sum(reply in outputs for reply in replies) / max(1, len(replies))
        store.close()
    return _Rotation(calls=recorder.calls, turns=turns, verbatim=verbatim)


def _same_requests(backend: LlamaCppBackend, last_round: list[_Call]) -> _SameRequests:
    """Cache hit vs miss, and constrained vs free decoding, on identical requests and seeds."""
    warm, cold, free = [], [], []
    for request, generation in last_round:
        warm.append(generation)
        backend.invalidate(request.npc_id)
        cold.append(backend.generate(request))
        free_request = request.model_copy(update={"output_schema": None, "max_tokens": 96})
        if (rate := _decode_tok_s(backend.generate(free_request))) is not None:
            free.append(rate)
    return _SameRequests(warm=warm, cold=cold, free_rates=free)


def _figures(backend: LlamaCppBackend, rotation: _Rotation, same: _SameRequests) -> dict[str, object]:
    """The rotation's and the identical requests' figures, from `generations` to `schema_valid_rate`."""
    generations = [generation for _, generation in rotation.calls]
    constrained = [r for g in generations if (r := _decode_tok_s(g)) is not None]
    repeat = [g for turn in rotation.turns[1:] for _, g in turn]
    ttft_cold, ttft_warm = _median([g.ttft_ms for g in same.cold]), _median([g.ttft_ms for g in same.warm])
    free_rate, constrained_rate = _median(same.free_rates), _median(constrained)
    static_prefix = int(statistics.median(len(backend.tokenize_prompt(r.prompt).prefix) for r, _ in rotation.turns[-1]))
    return {
        "generations": len(rotation.calls),
        "static_prefix_tokens": static_prefix,
        "prompt_tokens_per_turn": round(statistics.mean(g.tokens_evaluated + g.tokens_cached for g in repeat), 1),
        "prompt_tokens_evaluated_per_turn": round(statistics.mean(g.tokens_evaluated for g in repeat), 1),
        # The mean is pulled up by turns whose previous reply could not be replayed as the model
        # wrote it (a change the gate refused, a rewritten line): the median shows the usual turn.
        "prompt_tokens_evaluated_per_turn_p50": statistics.median(g.tokens_evaluated for g in repeat),
        "replies_replayed_verbatim_rate": round(rotation.verbatim, 3),
        "prefill_tok_s": _median([g.tokens_evaluated / (g.ttft_ms / 1000) for g in same.cold if g.ttft_ms > 0]),
        "decode_tok_s": free_rate,
        "constrained_decode_tok_s": constrained_rate,
        "constrained_vs_free_decode": round(free_rate / constrained_rate, 2) if constrained_rate else float("nan"),
        "ttft_cold_ms": ttft_cold,
        "ttft_warm_ms": ttft_warm,
        "kv_hit_speedup": round(ttft_cold / ttft_warm, 1) if ttft_warm else float("nan"),
        # A hit reused at least the NPC's static prefix (a few shared template tokens are no hit).
        "rotation_kv_hits": sum(g.tokens_cached >= static_prefix for g in generations),
        "rotation_kv_misses": sum(g.tokens_cached < static_prefix for g in generations),
        "resident_prefixes": backend.resident_prefixes,
        "kv_state_mb_per_npc": round(static_prefix * backend.native_model.kv_bytes_per_token / 2**20, 1),
        "grammar_full_filter_rate": round(backend.stats.grammar_full_filters / max(1, backend.stats.tokens_generated), 4),
        # The grammar's forced tokens, decoded with the token before them (`forced_run`).
        "forced_token_share": round(backend.stats.tokens_forced / max(1, backend.stats.tokens_generated), 3),
        "decode_calls_per_line": round(backend.stats.decode_calls / max(1, backend.stats.generations), 1),
        "truncated_outputs": sum(g.finish_reason == "length" for g in generations),
        "schema_valid_rate": round(sum(strictly_valid(g.text) for g in generations) / len(generations), 3),
    }


def bench_inference(
    *,
    npcs: int = 8,
    rounds: int = 3,
    model: str | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    device: str = "auto",
    reproducible: bool = False,
) -> dict[str, object]:
    backend = LlamaCppBackend(
        LlamaCppConfig(model_path=model, n_threads=threads, n_gpu_layers=gpu_layers, device=device, reproducible=reproducible)
    )
    started = time.perf_counter()
    rotation = _rotation(RecordingBackend(backend), npcs, rounds)
    same = _same_requests(backend, rotation.turns[-1])
    figures: dict[str, object] = {
        "model": backend.fingerprint().file_name,
        "engine": "reproducible" if reproducible else "batched",
        "threads": backend.n_threads,
        "npcs": npcs,
        **_figures(backend, rotation, same),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    backend.close()
    return figures
