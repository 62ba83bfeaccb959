"""The authority matrix: every source against every kind of write, allowed and refused."""

from __future__ import annotations

import itertools

import pytest

from loreguard.memory import MemoryStore
from loreguard.schemas import (
    WORLD_SCOPE,
    AddCanonicalFact,
    AppendEpisodic,
    Authority,
    CanonicalFact,
    MemoryKind,
    MemoryWrite,
    RefusalCode,
    RemoveEntry,
    ReplaceCanonicalFact,
    SetWorldState,
    UpsertBelief,
)

SOURCES = list(Authority)


def _ops(scope: str, tag: str) -> dict[str, object]:
    return {
        "add_canonical": AddCanonicalFact(scope=scope, fact=CanonicalFact(id=f"new_{tag}", text="A new truth.")),
        "replace_canonical": ReplaceCanonicalFact(scope=scope, fact=CanonicalFact(id="gate_hours", text="Never closes.")),
        "remove_canonical": RemoveEntry(scope=scope, kind=MemoryKind.CANONICAL, entry_id="gate_hours"),
        "set_world_state": SetWorldState(scope=scope, key="alarm", value=True),
        "remove_world_state": RemoveEntry(scope=scope, kind=MemoryKind.WORLD_STATE, entry_id="seeded"),
        "append_episodic": AppendEpisodic(scope=scope, text="The player waved.", significance=0.4, at_interaction=1),
        "upsert_belief": UpsertBelief(scope=scope, belief_id="player_kind", content="The player is kind.", confidence=0.6),
        "remove_belief": RemoveEntry(scope=scope, kind=MemoryKind.BELIEF, entry_id="seeded_belief"),
    }


#: (operation, least authority that may do it); None: nobody may.
EXPECTED = {
    "add_canonical": Authority.DESIGNER,
    "replace_canonical": None,
    "remove_canonical": None,
    "set_world_state": Authority.GAME_SYSTEM,
    "remove_world_state": Authority.GAME_SYSTEM,
    "append_episodic": Authority.VALIDATED_OUTPUT,
    "upsert_belief": Authority.VALIDATED_OUTPUT,
    "remove_belief": Authority.VALIDATED_OUTPUT,
}


def _seed(store: MemoryStore, scope: str) -> None:
    result = store.apply(
        [
            MemoryWrite(source=Authority.DESIGNER, op=SetWorldState(scope=scope, key="seeded", value=1)),
            MemoryWrite(
                source=Authority.DESIGNER,
                op=UpsertBelief(scope=scope, belief_id="seeded_belief", content="Seeded.", confidence=0.5),
            ),
        ]
    )
    assert result.committed


@pytest.mark.parametrize("scope", ["guard", WORLD_SCOPE])
@pytest.mark.parametrize(("source", "operation"), list(itertools.product(SOURCES, EXPECTED)))
def test_authority_matrix(store: MemoryStore, scope: str, source: Authority, operation: str) -> None:
    if scope == WORLD_SCOPE and operation in ("replace_canonical", "remove_canonical"):
        store.load_world(store.world().model_copy(update={"canonical_facts": (CanonicalFact(id="gate_hours", text="x"),)}))
    _seed(store, scope)
    before = store.memory_hash()
    op = _ops(scope, source.name.lower())[operation]
    result = store.apply([MemoryWrite(source=source, op=op)])

    least = EXPECTED[operation]
    allowed = least is not None and source >= least
    assert result.committed is allowed
    if allowed:
        assert result.applied == 1 and not result.refusals
        assert store.memory_hash() != before
    else:
        assert store.memory_hash() == before
        (refusal,) = result.refusals
        expected_code = RefusalCode.CANONICAL_IMMUTABLE if least is None else RefusalCode.AUTHORITY
        assert refusal.code is expected_code
        assert store.counters[f"refused.{expected_code.value}"] == 1


def test_llm_suggestion_can_write_nothing(store: MemoryStore) -> None:
    before = store.memory_hash()
    ops = _ops("guard", "llm")
    result = store.apply([MemoryWrite(source=Authority.LLM_SUGGESTION, op=op) for op in ops.values()])
    assert not result.committed
    assert len(result.refusals) == len(ops)
    assert store.memory_hash() == before
    assert store.counters["batches_refused"] == 1


def test_unknown_scope_is_refused_not_created(store: MemoryStore) -> None:
    result = store.apply([MemoryWrite(source=Authority.DESIGNER, op=SetWorldState(scope="ghost", key="k", value=1))])
    assert not result.committed
    assert result.refusals[0].code is RefusalCode.UNKNOWN_SCOPE
    assert "ghost" not in store.npc_ids()
