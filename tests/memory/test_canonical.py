"""Canonical facts are immutable: no source, no path (including save/load) changes one."""

from __future__ import annotations

from pathlib import Path

from factories import eldmoor_world, guard_profile
from stores import open_store

from loreguard.memory import MemoryPolicy, MemoryStore, plan_batch
from loreguard.schemas import (
    WORLD_SCOPE,
    AddCanonicalFact,
    Authority,
    CanonicalFact,
    MemoryKind,
    MemoryWrite,
    RefusalCode,
    RemoveEntry,
    ReplaceCanonicalFact,
    UpsertBelief,
)


def _fact_text(store: MemoryStore, fact_id: str) -> str:
    (item,) = [c for c in store.scope("guard").canonical if c.fact.id == fact_id]
    return item.fact.text


def test_duplicate_id_fails(store: MemoryStore) -> None:
    result = store.apply(
        [
            MemoryWrite(
                source=Authority.DESIGNER,
                op=AddCanonicalFact(scope="guard", fact=CanonicalFact(id="king_name", text="The king is Edward.")),
            )
        ]
    )
    assert not result.committed
    assert result.refusals[0].code is RefusalCode.DUPLICATE_ID
    assert _fact_text(store, "king_name") == "The king of Eldmoor is named Arthur."


def test_same_fact_again_is_idempotent(store: MemoryStore) -> None:
    before = store.memory_hash()
    assert store.register_npc(guard_profile()).committed
    assert store.memory_hash() == before


def test_no_source_can_replace_or_remove(store: MemoryStore) -> None:
    before = store.memory_hash()
    for source in Authority:
        for op in (
            ReplaceCanonicalFact(scope="guard", fact=CanonicalFact(id="king_name", text="The king is Edward.")),
            RemoveEntry(scope="guard", kind=MemoryKind.CANONICAL, entry_id="king_name"),
        ):
            result = store.apply([MemoryWrite(source=source, op=op)])
            assert result.refusals[0].code is RefusalCode.CANONICAL_IMMUTABLE
    assert store.memory_hash() == before


def test_belief_cannot_shadow_a_canonical_fact(store: MemoryStore) -> None:
    result = store.apply(
        [
            MemoryWrite(
                source=Authority.DESIGNER,
                op=UpsertBelief(scope="guard", belief_id="king_name", content="The king is Edward.", confidence=1.0),
            )
        ]
    )
    assert result.refusals[0].code is RefusalCode.CANONICAL_IMMUTABLE


def test_reregistering_with_changed_fact_is_refused_whole(store: MemoryStore) -> None:
    before = store.memory_hash()
    changed = guard_profile(
        persona="A different persona.",
        canonical_facts=[{"id": "king_name", "text": "The king of Eldmoor is named Edward."}],
    )
    result = store.register_npc(changed)
    assert not result.committed
    assert store.memory_hash() == before
    assert store.profile("guard").persona == guard_profile().persona


def test_immutable_through_save_and_load(store: MemoryStore, store_path: Path) -> None:
    store.slots.save("slot1")
    store.slots.load("slot1")
    result = store.apply(
        [
            MemoryWrite(
                source=Authority.DESIGNER,
                op=ReplaceCanonicalFact(scope="guard", fact=CanonicalFact(id="king_name", text="Edward.")),
            )
        ]
    )
    assert not result.committed
    store.close()
    with MemoryStore(store_path) as reopened:
        assert _fact_text(reopened, "king_name") == "The king of Eldmoor is named Arthur."
        again = reopened.apply(
            [
                MemoryWrite(
                    source=Authority.DESIGNER,
                    op=AddCanonicalFact(scope="guard", fact=CanonicalFact(id="king_name", text="Edward.")),
                )
            ]
        )
        assert again.refusals[0].code is RefusalCode.DUPLICATE_ID


# --- a belief never shares an id with a canonical fact it can see, on any write path ------------


def _belief(scope: str, belief_id: str) -> MemoryWrite:
    return MemoryWrite(
        source=Authority.VALIDATED_OUTPUT,
        op=UpsertBelief(scope=scope, belief_id=belief_id, content="The river runs dry.", confidence=0.5),
    )


def test_apply_refuses_a_belief_named_like_a_world_fact(store: MemoryStore) -> None:
    before = store.memory_hash()
    result = store.apply([_belief("guard", "river")])
    assert not result.committed
    assert result.refusals[0].code is RefusalCode.CANONICAL_IMMUTABLE
    assert store.memory_hash() == before and store.scope("guard").beliefs == ()


def test_plan_refuses_a_belief_named_like_a_world_fact(store: MemoryStore) -> None:
    planned = store.plan([_belief("guard", "river")], hash_scopes=("guard", WORLD_SCOPE))
    assert not planned.ok and planned.plan.refusals[0].code is RefusalCode.CANONICAL_IMMUTABLE
    assert not store.commit(planned).committed and store.scope("guard").beliefs == ()


def test_plan_batch_refuses_a_belief_named_like_a_fact_added_earlier_in_the_batch(store: MemoryStore) -> None:
    fact = MemoryWrite(
        source=Authority.DESIGNER, op=AddCanonicalFact(scope=WORLD_SCOPE, fact=CanonicalFact(id="moon", text="One moon."))
    )
    plan = plan_batch({s: store.scope(s) for s in ("guard", WORLD_SCOPE)}, [fact, _belief("guard", "moon")], 1, MemoryPolicy())
    assert [(r.index, r.code) for r in plan.refusals] == [(1, RefusalCode.CANONICAL_IMMUTABLE)]


def test_a_fact_may_not_take_the_id_of_an_existing_belief(store: MemoryStore) -> None:
    assert store.apply([_belief("guard", "moon")]).committed
    for scope in ("guard", WORLD_SCOPE):
        fact = AddCanonicalFact(scope=scope, fact=CanonicalFact(id="moon", text="One moon."))
        result = store.apply([MemoryWrite(source=Authority.DESIGNER, op=fact)])
        assert not result.committed and result.refusals[0].code is RefusalCode.DUPLICATE_ID, scope
    assert store.scope("guard").canonical_ids() == {"king_name", "gate_hours"}


def test_register_npc_refuses_a_fact_named_like_one_of_its_beliefs(store: MemoryStore) -> None:
    assert store.apply([_belief("guard", "moon")]).committed
    before = store.memory_hash()
    profile = guard_profile(
        persona="Changed.",
        canonical_facts=[*(f.model_dump() for f in guard_profile().canonical_facts), {"id": "moon", "text": "One moon."}],
    )
    result = store.register_npc(profile)
    assert not result.committed and result.refusals[0].code is RefusalCode.DUPLICATE_ID
    assert store.memory_hash() == before and store.profile("guard").persona == guard_profile().persona


def test_load_world_refuses_a_fact_named_like_an_npc_belief(store: MemoryStore) -> None:
    assert store.apply([_belief("guard", "moon")]).committed
    world = eldmoor_world(
        canonical_facts=[{"id": "river", "text": "The river Ald runs through Eldmoor."}, {"id": "moon", "text": "x"}]
    )
    result = store.load_world(world)
    assert not result.committed and result.refusals[0].code is RefusalCode.DUPLICATE_ID
    assert store.world() == eldmoor_world()


# --- the order a designer listed facts in changes nothing ----------------------------------------


def test_facts_listed_in_any_order_give_one_memory_hash(tmp_path: Path) -> None:
    facts = [{"id": f"fact_{i}", "text": f"Fact number {i}."} for i in range(5)]
    stores = [
        open_store(
            tmp_path / f"{name}.sqlite",
            world=eldmoor_world(canonical_facts=order),
            npcs=[guard_profile(canonical_facts=list(reversed(order)))],
        )
        for name, order in (("listed", facts), ("reversed", list(reversed(facts))))
    ]
    try:
        listed, reversed_ = stores
        assert listed.memory_hash() == reversed_.memory_hash()
        assert listed.profile_hash("guard") == reversed_.profile_hash("guard")
        assert listed.world_hash() == reversed_.world_hash()
        assert [f.id for f in listed.profile("guard").canonical_facts] == [f"fact_{i}" for i in range(5)]
    finally:
        for store in stores:
            store.close()
