"""Everything an interaction works out before the model is asked: intake -> contract ->
expectancy -> sufficiency -> snapshot, into the run the attempts and endings share.

Pure: it reads one consistent view of memory and returns the run; what it reports (a world
state of the wrong type) goes to the caller's `on_mistyped`.
"""

from __future__ import annotations

from collections.abc import Callable

from loreguard.memory.store import StoreView
from loreguard.schemas.base import JsonScalar
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.memory import GAME_SEED_KEY
from loreguard.server.pipeline.contract import ContextContract, Sufficiency, Verdict, check_sufficiency, contract_for, vocabulary
from loreguard.server.pipeline.expectancy import RuleEvaluation, evaluate_rules
from loreguard.server.pipeline.interaction import intake, seed_for
from loreguard.server.pipeline.running.run_state import InteractionRun, PhaseTimer
from loreguard.server.pipeline.snapshot import build_snapshot, merged_state


def prepare(
    view: StoreView,
    context: InteractionContext,
    *,
    timer: PhaseTimer,
    max_attempts: int,
    decay: float,
    sampling: dict[str, float | int],
    on_mistyped: Callable[[InteractionContext, tuple[str, ...]], None] | None = None,
) -> InteractionRun:
    """The run of `context` against `view`, each phase lapped on `timer`. `on_mistyped` hears
    of world state whose type does not fit a rule's condition (the game is asked to clarify)."""
    profile, world = view.profile, view.world
    seeded = view.world_memory.state_value(GAME_SEED_KEY)
    game_seed = seeded if isinstance(seeded, int) and not isinstance(seeded, bool) else None
    taken = intake(context, view.interactions, seed_for(game_seed, view.interactions))
    ctx = taken.context
    npc_memory, world_memory = view.npc, view.world_memory
    timer.lap("intake")

    vocab = vocabulary(
        merged_state(world_memory, npc_memory),
        world.state_claims if world else {},
        [c.fact for c in world_memory.canonical + npc_memory.canonical],
        npc_memory.beliefs,
        profile.bounds.belief_threshold,
        view.recall,
    )
    contract = contract_for(ctx, vocab)
    timer.lap("contract")

    evaluation, sufficiency, derived = _rules_and_sufficiency(view, ctx, taken.interaction_index, contract, timer, on_mistyped)

    snapshot = build_snapshot(
        context=ctx,
        interaction_index=taken.interaction_index,
        seed=taken.seed,
        profile=profile,
        profile_hash=view.profile_hash,
        memory_hash=view.scopes_hash,
        world=world,
        npc_memory=npc_memory,
        world_memory=world_memory,
        contract=contract,
        constraints=evaluation.constraints,
        derived=derived,
        max_attempts=max_attempts,
        decay=decay,
        recall=view.recall,
    )
    timer.lap("snapshot")
    return InteractionRun(
        sampling=sampling,
        received=context,
        ctx=ctx,
        view=view,
        interaction_index=taken.interaction_index,
        seed=taken.seed,
        scopes=tuple(name for name, _ in view.scope_hashes),
        hash_before=view.memory_hash,
        task_type=contract.task_type.value,
        sufficiency=sufficiency,
        first_snapshot=snapshot,
        timer=timer,
    )


def _rules_and_sufficiency(
    view: StoreView,
    ctx: InteractionContext,
    index: int,
    contract: ContextContract,
    timer: PhaseTimer,
    on_mistyped: Callable[[InteractionContext, tuple[str, ...]], None] | None,
) -> tuple[RuleEvaluation, Sufficiency, dict[str, JsonScalar]]:
    """expectancy -> sufficiency: the rules active now, whether the context suffices, and the
    world-state values derived to complete it. A `retry` verdict re-gathers once with the
    derived values; what is still missing after that is the game's to provide."""
    world, npc_memory, world_memory = view.world, view.npc, view.world_memory
    state = merged_state(world_memory, npc_memory)
    rules = (world.rules if world else ()) + view.profile.rules
    evaluation = evaluate_rules(rules, ctx, index, state, view.behaviour, task_type=contract.task_type)
    timer.lap("expectancy")

    sufficiency = check_sufficiency(
        contract, evaluation.missing_state, state, world.state_defaults if world else {}, evaluation.mistyped_state
    )
    if sufficiency.mistyped and on_mistyped is not None:
        on_mistyped(ctx, sufficiency.mistyped)
    derived: dict[str, JsonScalar] = {}
    if sufficiency.verdict is Verdict.RETRY:
        derived = dict(sufficiency.derived)
        state = merged_state(world_memory, npc_memory, derived)
        evaluation = evaluate_rules(rules, ctx, index, state, view.behaviour, task_type=contract.task_type)
        again = check_sufficiency(contract, evaluation.missing_state, state, {}, evaluation.mistyped_state)
        if again.verdict is not Verdict.PASS:
            sufficiency = again
    if sufficiency.verdict is Verdict.CLARIFY:
        sufficiency = sufficiency.model_copy(update={"rules": evaluation.unevaluable_rules})
    timer.lap("sufficiency")
    return evaluation, sufficiency, derived
