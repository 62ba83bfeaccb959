"""Stage 8: approved mutations become memory writes, applied as one transaction.

`plan_writes` is pure: approved mutations are sorted into a deterministic order (by kind, then
by their canonical serialization), mapped to writes with ValidatedOutput authority, and joined
by the exchange record. The lifecycle commits them with the interaction count in one batch.

`stored_key` is the one place that says which memory key a mutation writes. The gate checks
authority on it and `plan_writes` writes under it, so the two cannot disagree (a relationship
with `player` is stored as `rel.player`, and that is the name a canonical fact could hold).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from loreguard.memory.hashing import canonical_json
from loreguard.schemas.interaction import SceneLine, SceneTurn
from loreguard.schemas.memory import AppendEpisodic, Authority, ExchangeTurn, MemoryWrite, ScopeMemory, UpsertBelief
from loreguard.schemas.output import (
    AppendEpisodicMutation,
    EmitWorldIntentMutation,
    Emotion,
    ProposedMutation,
    TransformBeliefMutation,
    TransformRelationshipMutation,
)
from loreguard.server.pipeline.turn.transcript import (
    EXCHANGE_TAG,
    HEARD_TAG,
    MODEL_TAG,
    exchange_text,
    player_message,
    scene_line_text,
    scene_tag,
    turn_reply,
)

_KIND_ORDER = {"append_episodic": 0, "transform_belief": 1, "transform_relationship": 2, "emit_world_intent": 3}
RELATIONSHIP_PREFIX = "rel."
EXCHANGE_SIGNIFICANCE = 0.3


def mutation_order(m: ProposedMutation) -> tuple[int, bytes]:
    return _KIND_ORDER[m.kind], canonical_json(m)


def belief_key(m: TransformBeliefMutation | TransformRelationshipMutation) -> str:
    """The belief id a belief or relationship change is stored under."""
    if isinstance(m, TransformRelationshipMutation):
        return f"{RELATIONSHIP_PREFIX}{m.target}"
    return m.target


def stored_key(m: ProposedMutation) -> str | None:
    """The id of the memory entry `m` writes, or None when it names none: an episodic entry's
    id is its sequence number, given by the store, and an intent writes no memory."""
    if isinstance(m, (TransformBeliefMutation, TransformRelationshipMutation)):
        return belief_key(m)
    return None


def plan_writes(
    approved: Sequence[ProposedMutation],
    *,
    npc_id: str,
    npc_name: str,
    interaction_index: int,
    memory: ScopeMemory,
    player_input: str,
    dialogue: str,
    emotion: Emotion = Emotion.NEUTRAL,
    turn_message: str = "",
    raw_output: str = "",
    scene: SceneTurn | None = None,
) -> list[MemoryWrite]:
    """The writes for an accepted output. `turn_message` is the player's message as the prompt
    put it (context included); the exchange keeps it with the reply so that later prompts replay
    the turn exactly (`player_message` when not given). The reply is `raw_output` itself when
    that says exactly what was accepted (the model's bytes, which the engine has cached), else
    the accepted output written in the grammar's layout. In a scene, the exchange is the NPC's
    own line (what it heard is in its memory already) and is tagged with the scene."""
    writes: list[MemoryWrite] = []
    beliefs = {b.id: b for b in memory.beliefs}

    def write(op: object) -> None:
        writes.append(MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=op))

    # One mutation (the usual case) needs no ordering, and its key costs a canonical JSON.
    for m in sorted(approved, key=mutation_order) if len(approved) > 1 else approved:
        if isinstance(m, AppendEpisodicMutation):
            write(
                AppendEpisodic(
                    scope=npc_id, text=m.text, significance=m.significance, at_interaction=interaction_index, tags=(MODEL_TAG,)
                )
            )
        elif isinstance(m, TransformBeliefMutation):
            write(
                UpsertBelief(
                    scope=npc_id, belief_id=belief_key(m), content=m.content, confidence=m.confidence, sentiment=m.sentiment
                )
            )
        elif isinstance(m, TransformRelationshipMutation):
            belief_id = belief_key(m)
            current = beliefs[belief_id].sentiment if belief_id in beliefs else 0.0
            affinity = max(-1.0, min(1.0, round(current + m.delta, 6)))
            write(
                UpsertBelief(
                    scope=npc_id,
                    belief_id=belief_id,
                    content=f"My feelings toward {m.target}: {affinity:+.2f} (-1 hostile, +1 devoted).",
                    confidence=1.0,
                    sentiment=affinity,
                )
            )
        elif isinstance(m, EmitWorldIntentMutation):
            continue  # intents go back to the game; they do not write memory
    exchange = exchange_text(npc_name, player_input if scene is None else "", dialogue)
    write(
        AppendEpisodic(
            scope=npc_id,
            text=exchange[:4000],
            significance=EXCHANGE_SIGNIFICANCE,
            at_interaction=interaction_index,
            tags=(EXCHANGE_TAG,) if scene is None else (EXCHANGE_TAG, scene_tag(scene.scene_id, scene.run)),
            turn=ExchangeTurn(
                player=turn_message or player_message(player_input), reply=_reply(dialogue, emotion, approved, raw_output)
            ),
        )
    )
    return writes


def heard_writes(
    scene: SceneTurn, line: SceneLine, memories: Sequence[ScopeMemory], source: Authority = Authority.VALIDATED_OUTPUT
) -> list[MemoryWrite]:
    """A line said in a scene, as a memory of each NPC present (`scene.present`, in that order):
    one memory each, attributed to its speaker, tagged with the scene. `memories` holds the
    present NPCs' scopes: each memory is dated by its NPC's own newest memory (the NPC's clock,
    which the scope itself fixes, so a replay dates it the same)."""
    by_scope = {m.scope: m for m in memories}
    text = scene_line_text(line)[:4000]
    writes = []
    for member in scene.present:
        held = by_scope[member.npc_id].episodic
        writes.append(
            MemoryWrite(
                source=source,
                op=AppendEpisodic(
                    scope=member.npc_id,
                    text=text,
                    significance=EXCHANGE_SIGNIFICANCE,
                    at_interaction=max((e.at_interaction for e in held), default=0),
                    tags=(HEARD_TAG, scene_tag(scene.scene_id, scene.run)),
                ),
            )
        )
    return writes


def _reply(dialogue: str, emotion: Emotion, approved: Sequence[ProposedMutation], raw_output: str) -> str:
    reply = turn_reply(dialogue, emotion, approved)
    return raw_output if raw_output.strip() == raw_output and _same_json(raw_output, reply) else reply


def _same_json(text: str, reply: str) -> bool:
    """Whether `text` is strict JSON with the same value as `reply` (a lenient parse is not)."""
    try:
        return bool(json.loads(text) == json.loads(reply))
    except ValueError:
        return False
