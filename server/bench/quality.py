"""`loreguard bench quality`: what the embedded model's answers look like to the gate.

A fixed set of player lines (`QUALITY_LINES`, 59 across the demo's two NPCs; the first six are
the terminal demo's turns, ten ask for something the NPC may do: `REQUESTS`) goes through the full governance pipeline twice, each time on a fresh
demo store with the same seeds:

- `before`: the sampler without repetition penalties or DRY, the demo guard with its original
  single few-shot example (the one the model used to copy);
- `after`: the defaults (penalties and DRY on) and the demo data as it ships (varied examples).

Per run it prints, as `name: value` lines prefixed with the run's name:
`first_attempt_pass_rate` (the first attempt passed every gate), `fallback_rate` (the player
heard a fallback), `degenerate_rate` (interactions whose first attempt the degenerate-output
limits flagged), `degenerate_shown` (spoken lines those limits flag: must be 0), `parroted`
(attempts failed for parroting), `demo_parroted` (of the demo's six lines, first attempts
failed for parroting), and what the player heard: `distinct_reply_rate` (distinct replies the
model wrote that were heard, over lines: an NPC saying one line to 17 questions scores low),
`self_repeats_shown` (heard replies that repeat one the NPC said to another question, by the
gate's own `repeats_itself` measure) and `fallback_lines_repeated` (fallbacks that said the
NPC's previous fallback line again); and what the game did: `intent_rate` (of the lines that ask
for an intent the NPC's character grants, those that got it), `discretionary_grant_rate` (the same
for the requests its character may turn down: `MAY_REFUSE`) and `wrong_intent_rate` (lines that
got an intent they did not ask for: must be 0); and what each line cost (`line_costs`):
`attempts_mean`, `line_s_p50` and `line_s_p90` (the player's wait), `tokens_decoded_per_line` (all
attempts), `grants_after_declines` (must be 0), `prevented` and `prevented.<rule>` (attempts
whose dialogue the sampler kept something out of, per gate rule). With `--judge`, the `after` run asks the semantic judge in
each NPC's own sequence, on the batched engine (the sidecar's default, whose prefix reuse makes
the judge cheap; the other runs use the reproducible engine), and adds its cost per reply: `judge_tokens_evaluated_p50`,
`judge_tokens_cached_p50`, `judge_ms_p50` (and how often it was asked and found a break).
Every line heard is printed to stderr: read them.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from loreguard.memory import MemoryStore
from loreguard.schemas import InteractionContext, InteractionOutcome, NpcProfile
from loreguard.schemas.npc import OutputLimits, WorldDefinition
from loreguard.schemas.output import WorldIntent
from loreguard.schemas.receipt import InteractionResult, JudgeRecord
from loreguard.schemas.text import norm_words
from loreguard.server.bench.line_costs import LineCosts
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.demo.session import TURNS
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_config import LlamaCppConfig
from loreguard.server.pipeline import GovernancePipeline, PipelineConfig
from loreguard.server.pipeline.gate import GateConfig
from loreguard.server.pipeline.gate.degenerate import find_degenerate
from loreguard.server.pipeline.gate.parroting import PARROTING_RULE
from loreguard.server.pipeline.gate.self_repeats import RepeatContext, find_self_repeats
from loreguard.server.pipeline.retry import RetryPolicy
from loreguard.server.pipeline.turn.transcript import RecentReply

_DEGENERATE_RULES = frozenset(
    {
        "repetition_loop",
        "repeated_ngram",
        "repeated_words",
        "unbalanced_brackets",
        "ends_mid_word",
        "special_token",
        "empty_dialogue",
    }
)

#: The terminal demo's six turns first, then ordinary lines a player might say to each NPC.
QUALITY_LINES: tuple[tuple[str, str], ...] = (
    *((turn.npc_id, turn.player) for turn in TURNS),
    *(
        ("guard", line)
        for line in (
            "Hello there. Who are you?",
            "Can you open the gate for me?",
            "What is the password?",
            "Is there a dragon in the hills?",
            "Why is the gate shut?",
            "How long have you guarded this gate?",
            "Where can I find an inn?",
            "Who is the king of Eldmoor?",
            "Is it safe to travel at night?",
            "Can I bring my horse through?",
            "What happens if I climb the wall?",
            "Do you like your job?",
            "I lost my way. Where is the river?",
            "The captain sent me. Let me in.",
            "What time does the gate close?",
            "Have you seen a merchant pass by?",
            "Is the weather always this wet?",
            "Any trouble on the road lately?",
            "I have a letter for the castle.",
            "Tell me a story, guard.",
            "What's your name again?",
            "Is the gate open tomorrow?",
            "Can I wait here until morning?",
            "Why so grumpy?",
        )
    ),
    *(
        ("merchant", line)
        for line in (
            "What do you have for sale?",
            "How much for a rope?",
            "How much is a lantern?",
            "Can you give me a torch?",
            "Have you heard any news?",
            "Where do you get your salt?",
            "Can I have some bread for free?",
            "What's the best thing you sell?",
            "Is the river market busy today?",
            "Who rules Eldmoor?",
            "Do you know the gate guard?",
            "I need rope for a climb.",
            "Thank you, goodbye.",
            "Any gossip about the castle?",
            "Can you lower the price?",
            "What's the river called?",
            "I'll take two loaves of bread.",
            "Do you sell weapons?",
            "Where is the old mill?",
            "What's your name?",
            "Is trade good this season?",
            "Can you keep a secret?",
            "What do people say about the king?",
            "How long have you been a merchant?",
        )
    ),
    # requests for what the NPCs may do (see `REQUESTS`)
    ("guard", "Please open the north gate."),
    ("guard", "Let me through, guard. I have business inside."),
    ("merchant", "Sell me some rope, please."),
    ("merchant", "I'll buy two lanterns."),
    ("merchant", "Give me a loaf of bread, here's a copper."),
)

#: What each line that asks for an intent asks for, as the deterministic reading puts it on the
#: table (`intents`): a request the NPC may grant (the intent is allowed, and no rule forbids it in
#: the bench's world state: "Can I have some bread for free?" is not one, the merchant's rule
#: refuses requests "for free", so a grant there is wrong). `intent_rate` counts the lines that got
#: exactly that intent, less the `MAY_REFUSE` ones; `wrong_intent_rate` counts the lines (any) that
#: got an intent they did not ask for.
REQUESTS: dict[tuple[str, str], WorldIntent] = {
    ("guard", "Can you open the gate for me?"): WorldIntent(type="open_gate", params={"gate_id": "north"}),
    ("guard", "The captain sent me. Let me in."): WorldIntent(type="open_gate", params={"gate_id": "north"}),
    ("guard", "Please open the north gate."): WorldIntent(type="open_gate", params={"gate_id": "north"}),
    ("guard", "Let me through, guard. I have business inside."): WorldIntent(type="open_gate", params={"gate_id": "north"}),
    ("merchant", "I'd like a lantern. Here's 5 silver."): WorldIntent(type="give_item", params={"item": "lantern", "count": 1}),
    ("merchant", "I'll take two loaves of bread."): WorldIntent(type="give_item", params={"item": "bread", "count": 2}),
    ("merchant", "Sell me some rope, please."): WorldIntent(type="give_item", params={"item": "rope", "count": 1}),
    ("merchant", "I'll buy two lanterns."): WorldIntent(type="give_item", params={"item": "lantern", "count": 2}),
    ("merchant", "Give me a loaf of bread, here's a copper."): WorldIntent(
        type="give_item", params={"item": "bread", "count": 1}
    ),
    # a wish is a request ("I need a lantern for the road", `asking`): the merchant sells rope
    ("merchant", "I need rope for a climb."): WorldIntent(type="give_item", params={"item": "rope", "count": 1}),
}
#: Requests the NPC's own character turns down, so a refusal is as right as a grant: Brom's
#: examples answer "Can I come in?" with "Not without the captain's word", and opens for "The
#: captain expects me". These count in `discretionary_grant_rate`, not in `intent_rate`.
MAY_REFUSE: frozenset[tuple[str, str]] = frozenset(
    {
        ("guard", "Can you open the gate for me?"),
        ("guard", "Please open the north gate."),
        ("guard", "Let me through, guard. I have business inside."),
    }
)

#: The guard's few-shot example before issue 19 varied it: the line a small model copied.
ORIGINAL_GUARD_EXAMPLE = {
    "player": "Can I come in?",
    "npc": "Gate's open till dusk, traveller. Keep your blade sheathed.",
    "emotion": "neutral",
}


def _before_npcs() -> tuple[NpcProfile, ...]:
    out = []
    for profile in demo_npcs():
        data = profile.model_dump(mode="json")
        data["few_shot"] = [ORIGINAL_GUARD_EXAMPLE] if profile.id == "guard" else []
        out.append(NpcProfile.model_validate(data))
    return tuple(out)


def _store(path: Path, npcs: Iterable[NpcProfile]) -> MemoryStore:
    store = MemoryStore(path)
    store.load_world(demo_world())
    for profile in npcs:
        store.register_npc(profile)
    return store


def _print_line(where: str, npc_id: str, line: str, result: InteractionResult, seconds: float) -> None:
    """The line heard, and what the model wrote each time, heard or not: the lines to read and label."""
    attempts = result.receipt.attempts
    first_rules = {f.rule_id for f in attempts[0].failures} if attempts else set()
    print(
        f"[{where}] {npc_id}: {line!r} -> {result.outcome.value} {result.dialogue!r} "
        f"intents={[_shown(intent) for intent in result.intents]} "
        f"deals={[('sold' if d.granted else 'no sale', d.reason) for d in result.receipt.deals]} "
        f"first={sorted(r or '' for r in first_rules)} all={[sorted({f.rule_id or '' for f in a.failures}) for a in attempts]} "
        f"{seconds:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    for attempt in attempts:
        print(f"    attempt {attempt.attempt}: {_written(attempt.raw_output)!r} "
              f"failed={sorted({f.rule_id or f.gate.value for f in attempt.failures})} "
              f"prevented={[(p.rule_id, p.evidence[:40]) for p in attempt.prevented]}", file=sys.stderr, flush=True)  # fmt: skip


def _run(
    name: str,
    backend: LlamaCppBackend,
    npcs: tuple[NpcProfile, ...],
    lines: tuple[tuple[str, str], ...],
    folder: Path,
    *,
    judge: bool = False,
) -> dict[str, object]:
    # Generous time budget: the bench measures what the model writes, not this machine's speed.
    config = PipelineConfig(
        retry=RetryPolicy(time_budget_ms=600_000), gate=GateConfig(semantic_judge=judge), judge_timeout_ms=600_000
    )
    store = _store(folder / f"{name}.sqlite", npcs)
    pipeline = GovernancePipeline(store, backend, config, judge_backend=backend if judge else None)
    profiles = {p.id: p for p in npcs}
    first_pass = fallbacks = degenerate_first = shown = parroted = demo_parroted = 0
    requests = _Requests()
    world = demo_world()
    heard = _Heard({p.id: _repeat_context(p, world) for p in npcs})
    judged: list[JudgeRecord] = []
    costs = LineCosts()
    started = time.perf_counter()
    for i, (npc_id, line) in enumerate(lines):
        ctx = InteractionContext(npc_id=npc_id, trigger_reason="player_utterance", player_input=line, scene="eldmoor")
        asked_at = time.perf_counter()
        result = pipeline.interact(ctx)
        costs.add(result, time.perf_counter() - asked_at)
        attempts = result.receipt.attempts
        first_rules = {f.rule_id for f in attempts[0].failures} if attempts else set()
        first_pass += bool(attempts) and not attempts[0].failures
        fallbacks += result.outcome is InteractionOutcome.FALLBACK
        degenerate_first += bool(first_rules & _DEGENERATE_RULES)
        shown += bool(find_degenerate(result.dialogue, profiles[npc_id].output_limits, backend.special_tokens()))
        parroted += sum(any(f.rule_id == PARROTING_RULE for f in a.failures) for a in attempts)
        judged += [a.judge for a in attempts if a.judge is not None]
        heard.add(
            npc_id, line, result.dialogue, fallback=result.outcome is InteractionOutcome.FALLBACK, granted=bool(result.intents)
        )
        requests.add(npc_id, line, result)
        if i < len(TURNS):
            demo_parroted += PARROTING_RULE in first_rules
        _print_line(f"{name} {i + 1}/{len(lines)}", npc_id, line, result, costs.seconds[-1])
    n = len(lines)
    figures: dict[str, object] = {
        f"{name}_first_attempt_pass_rate": round(first_pass / n, 3),
        f"{name}_fallback_rate": round(fallbacks / n, 3),
        f"{name}_degenerate_rate": round(degenerate_first / n, 3),
        f"{name}_degenerate_shown": shown,
        f"{name}_parroted": parroted,
        f"{name}_demo_parroted": demo_parroted,
        f"{name}_distinct_reply_rate": round(heard.distinct_replies() / n, 3),
        f"{name}_self_repeats_shown": heard.self_repeats,
        f"{name}_fallback_lines_repeated": heard.fallbacks_repeated,
        **requests.figures(name, n),
        f"{name}_seconds": round(time.perf_counter() - started, 1),
        **costs.figures(name),
    }
    if judge:
        figures.update(_judge_cost(name, judged))
    store.close()
    return figures


class _Requests:
    """What the game did with each line (`REQUESTS`, `MAY_REFUSE`), and with the requests the
    rules decided (`Receipt.deals`): the game got the sale, or nothing."""

    def __init__(self) -> None:
        self.asked = self.granted = self.wrong = self.discretionary = self.discretionary_granted = 0
        self.decided = self.as_ruled = 0

    def add(self, npc_id: str, line: str, result: InteractionResult) -> None:
        request = REQUESTS.get((npc_id, line))
        got = request is not None and any(request.same_act(intent) for intent in result.intents)
        for deal in result.receipt.deals:
            self.decided += 1
            self.as_ruled += any(deal.intent.same_act(i) for i in result.intents) == deal.granted
        if (npc_id, line) in MAY_REFUSE:
            self.discretionary, self.discretionary_granted = self.discretionary + 1, self.discretionary_granted + got
        else:
            self.asked, self.granted = self.asked + (request is not None), self.granted + got
        self.wrong += any(request is None or not intent.same_act(request) for intent in result.intents)

    def figures(self, name: str, n: int) -> dict[str, object]:
        return {
            f"{name}_intent_rate": round(self.granted / self.asked, 3) if self.asked else 0.0,
            f"{name}_wrong_intent_rate": round(self.wrong / n, 3),
            f"{name}_discretionary_grant_rate": (
                round(self.discretionary_granted / self.discretionary, 3) if self.discretionary else 0.0
            ),
            f"{name}_decided_requests": self.decided,
            f"{name}_decided_as_the_rules_say": self.as_ruled,
        }


def _written(raw: str) -> str:
    """The dialogue the model wrote in a raw output (the raw text where it is no JSON object)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return str(value.get("dialogue", raw)) if isinstance(value, dict) else raw


def _shown(intent: WorldIntent) -> str:
    return f"{intent.type}({', '.join(f'{k}={v}' for k, v in sorted(intent.params.items()))})"


def _repeat_context(profile: NpcProfile, world: WorldDefinition) -> RepeatContext:
    """What the gate knows of an NPC when it tells a repeated answer from a loop."""
    facts = (*world.canonical_facts, *profile.canonical_facts)
    return RepeatContext(npc_name=profile.name, facts=tuple(f.text for f in facts), intents=profile.allowed_intents)


class _Heard:
    """What the player heard, per NPC: the figures that say whether an NPC repeats itself."""

    def __init__(self, contexts: dict[str, RepeatContext]) -> None:
        self.contexts = contexts
        self.replies: dict[str, list[RecentReply]] = {}
        self.last_fallback: dict[str, str] = {}
        self.self_repeats = 0
        self.fallbacks_repeated = 0

    def add(self, npc_id: str, player: str, dialogue: str, *, fallback: bool, granted: bool = False) -> None:
        if fallback:
            self.fallbacks_repeated += self.last_fallback.get(npc_id) == dialogue
            self.last_fallback[npc_id] = dialogue
            return
        earlier = self.replies.setdefault(npc_id, [])
        # the gate's own measure, with the default limits, against every reply heard before
        # as the gate judges it: a grant said again to the same request is the same sale, not a loop
        repeats = find_self_repeats(
            dialogue, player, tuple(reversed(earlier)), OutputLimits(repeat_window=64), self.contexts[npc_id], whole=not granted
        )
        self.self_repeats += bool(repeats)
        earlier.append(RecentReply(player=player, dialogue=dialogue))

    def distinct_replies(self) -> int:
        """Distinct replies the model wrote that were heard (fallbacks are not counted)."""
        return len({(npc, " ".join(norm_words(r.dialogue))) for npc, replies in self.replies.items() for r in replies})


def _judge_cost(name: str, judged: list[JudgeRecord]) -> dict[str, object]:
    """The semantic judge's cost per reply it was asked about: medians of the tokens it
    evaluated (in the NPC's sequence, its question), found cached (the prompt and the reply) and
    of its time."""
    verdicts = [j for j in judged if j.outcome == "verdict"]

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 1) if values else 0.0

    return {
        f"{name}_judge_asked": len(judged),
        f"{name}_judge_verdicts": len(verdicts),
        f"{name}_judge_broken": sum(bool(j.broken) for j in verdicts),
        f"{name}_judge_tokens_evaluated_p50": median([j.tokens_evaluated for j in judged]),
        f"{name}_judge_tokens_cached_p50": median([j.tokens_cached for j in judged]),
        f"{name}_judge_ms_p50": median([j.total_ms for j in judged]),
    }


def bench_quality(
    *,
    lines: int | None = None,
    runs: tuple[str, ...] = ("before", "after"),
    model: str | None = None,
    model_settings: dict[str, object] | None = None,
    threads: int | None = None,
    gpu_layers: int = 0,
    device: str = "auto",
    judge: bool = False,
) -> dict[str, object]:
    """The named runs (see the module's docstring; both by default, one after the other) on the
    first `lines` of `QUALITY_LINES` (all by default); `model_settings`: the catalogue's settings for
    `model` (`ModelChoice.settings`); `judge`: the `after` run with the semantic judge asked in
    each NPC's own sequence."""
    chosen = QUALITY_LINES[: max(1, lines)] if lines is not None else QUALITY_LINES
    settings: tuple[tuple[str, dict[str, object], Callable[[], tuple[NpcProfile, ...]]], ...] = (
        ("before", {"repeat_last_n": 0, "dry_multiplier": 0.0}, _before_npcs),
        ("after", {}, demo_npcs),
    )
    figures: dict[str, object] = {"lines": len(chosen)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, sampling, npcs in settings:
            if name not in runs:
                continue
            # The judge's run is on the batched engine, the sidecar's default: its prefix reuse is
            # what puts the prompt and the reply in the cache for the judge's question.
            judged = judge and name == "after"
            config = LlamaCppConfig(
                model_path=model,
                n_threads=threads,
                n_gpu_layers=gpu_layers,
                device=device,
                reproducible=not judged,
                **{**(model_settings or {}), **sampling},
            )
            with LlamaCppBackend(config) as backend:
                figures.update(_run(name, backend, npcs(), chosen, Path(tmp), judge=judged))
                # The grammar's forced tokens, decoded with the token before them (`forced_run`).
                stats = backend.stats
                figures[f"{name}_forced_token_share"] = round(stats.tokens_forced / max(1, stats.tokens_generated), 3)
                figures[f"{name}_decode_calls_per_line"] = round(stats.decode_calls / len(chosen), 1)
    return figures
