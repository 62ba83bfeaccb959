"""Canonical facts are immutable: no source, no path (including save/load) changes one."""

from __future__ import annotations

from pathlib import Path

from factories import guard_profile

from loreguard.memory import MemoryStore
from loreguard.schemas import (
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
    store.save("slot1")
    store.load("slot1")
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
