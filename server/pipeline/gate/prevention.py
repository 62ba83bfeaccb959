"""What the sampler keeps out of a reply: the gate's word checks, stated by their own modules.

Every refused attempt costs the player a whole generation, so what the gate would refuse on the
words alone is prevented while the words are decoded (`loreguard.server.inference.dialogue_guard`).
Each check states its own constraint beside its gate function, from the same lists and
thresholds, and `dialogue_constraints` gathers them for one attempt:

- `checks.constraint_bans`     the active rules' forbidden phrases and patterns, the secrets' words
- `register.register_bans`     narrating the player, giving in to them (not the assistant's phrases: see there)
- `voices.self_address_bans`   the NPC calling itself by its own name
- `parroting.copy_limits`      runs of an example's line, the player's lines, the persona
- `self_repeats.repeat_limits` runs of the NPC's recent replies to other questions, its habit's opening
- `deals.deal_bans`            with a sale the rules made, the words that turn it down and a sorry opening; with a decline, its grant phrases

The canonical facts and the lore are free: saying them as written is never refused as a copy.
The gate stays the verifier of record: every reply still passes it, and each attempt's receipt
lists what the sampler prevented (`AttemptRecord.prevented`).
"""

from __future__ import annotations

from loreguard.schemas.prevention import DialogueConstraints
from loreguard.server.pipeline.gate.checks import constraint_bans
from loreguard.server.pipeline.gate.deals import deal_bans, deal_openings
from loreguard.server.pipeline.gate.parroting import copy_limits
from loreguard.server.pipeline.gate.register import register_bans
from loreguard.server.pipeline.gate.self_repeats import repeat_context, repeat_limits
from loreguard.server.pipeline.gate.validation import copy_sources
from loreguard.server.pipeline.gate.voices import self_address_bans
from loreguard.server.pipeline.snapshot import StateSnapshot


def dialogue_constraints(snapshot: StateSnapshot) -> DialogueConstraints:
    """What attempt `snapshot.attempt` may not say, for the sampler; a function of the snapshot
    alone, so a replay keeps the same out."""
    limits, said = snapshot.output_limits, snapshot.context.said()
    repeats, openings = repeat_limits(said, snapshot.recent_replies, limits, repeat_context(snapshot))
    copies, echoes = copy_limits(limits, copy_sources(snapshot))
    banned = (
        *constraint_bans(snapshot.constraints.constraints, snapshot.secrets),
        *register_bans(),
        *self_address_bans(snapshot.npc_name, in_scene=snapshot.context.scene_turn is not None),
        *deal_bans(snapshot),
    )
    free = (*(fact.text for fact in snapshot.canonical), snapshot.world_lore)
    return DialogueConstraints(
        banned=banned,
        copies=(*copies, *repeats),
        openings=(*echoes, *openings, *deal_openings(snapshot)),
        free=tuple(t for t in free if t),
    )
