"""Beliefs that contradict canon are marked in the batch that makes them contradict, whichever
came first (memory/transitions.py), and the mark is part of memory like any other field."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import eldmoor_world, guard_profile

from loreguard.memory import MemoryStore, RetrievalQuery, canonical_json, memory_hash, retrieve_beliefs
from loreguard.schemas import (
    WORLD_SCOPE,
    AddCanonicalFact,
    AppendEpisodic,
    Authority,
    CanonicalFact,
    ContradictedBelief,
    MemoryWrite,
    RefusalCode,
    SetWorldState,
    UpsertBelief,
)

#: The guard's own profile already says the king is Arthur; these tests bring the claim in later.
PLAIN_GUARD = guard_profile(canonical_facts=[{"id": "gate_hours", "text": "The north gate closes at dusk."}])
KING_ARTHUR = CanonicalFact.model_validate(
    {
        "id": "king_name",
        "text": "The king of Eldmoor is named Arthur.",
        "claims": [{"subject": "king", "attribute": "name", "value": "Arthur"}],
    }
)


@pytest.fixture
def plain(store_path: Path):
    store = MemoryStore(store_path)
    assert store.load_world(eldmoor_world()).committed and store.register_npc(PLAIN_GUARD).committed
    yield store
    store.close()


def believe(scope: str, belief_id: str, content: str, confidence: float = 0.9) -> MemoryWrite:
    return MemoryWrite(
        source=Authority.VALIDATED_OUTPUT,
        op=UpsertBelief(scope=scope, belief_id=belief_id, content=content, confidence=confidence),
    )


def add_fact(scope: str, fact: CanonicalFact) -> MemoryWrite:
    return MemoryWrite(source=Authority.DESIGNER, op=AddCanonicalFact(scope=scope, fact=fact))


def beliefs(store: MemoryStore, scope: str = "guard") -> dict[str, bool]:
    """belief id -> contradicted."""
    return {b.id: b.contradicted for b in store.scope(scope).beliefs}


def live_beliefs(store: MemoryStore, scope: str = "guard") -> list[str]:
    query = RetrievalQuery(player_input="who is the king", now_interaction=0, max_beliefs=10)
    return [b.id for b, _ in retrieve_beliefs(store.scope(scope).beliefs, query)]


def test_belief_first_then_fact_marks_it_in_the_facts_batch(plain: MemoryStore) -> None:
    assert plain.apply([believe("guard", "king", "The king is named Edward.")]).committed
    assert beliefs(plain) == {"king": False} and live_beliefs(plain) == ["king"]
    seq_before = plain.scope("guard").beliefs[0].seq

    result = plain.apply([add_fact("guard", KING_ARTHUR)])
    assert result.committed and result.applied == 1
    assert result.contradicted == (ContradictedBelief(scope="guard", belief_id="king", fact_id="king_name"),)
    assert beliefs(plain) == {"king": True} and live_beliefs(plain) == []
    assert plain.scope("guard").beliefs[0].seq == seq_before  # marking is not a new write
    assert plain.counters["beliefs_contradicted"] == 1


def test_fact_first_then_belief_marks_it_in_the_beliefs_batch(plain: MemoryStore) -> None:
    assert plain.apply([add_fact("guard", KING_ARTHUR)]).committed
    result = plain.apply([believe("guard", "king", "The king is named Edward.")])
    assert result.committed and result.applied == 1
    assert result.contradicted == (ContradictedBelief(scope="guard", belief_id="king", fact_id="king_name"),)
    assert beliefs(plain) == {"king": True} and live_beliefs(plain) == []
    assert plain.counters["beliefs_contradicted"] == 1


@pytest.mark.parametrize("fact_first", [True, False], ids=["fact_then_belief", "belief_then_fact"])
def test_within_one_batch_either_order_gives_one_marked_row(plain: MemoryStore, store_path: Path, fact_first: bool) -> None:
    writes = [add_fact("guard", KING_ARTHUR), believe("guard", "king", "The king is named Edward.")]
    result = plain.apply(writes if fact_first else writes[::-1])
    assert result.committed and [c.belief_id for c in result.contradicted] == ["king"]
    assert beliefs(plain) == {"king": True}
    rows = plain.db.execute("SELECT data FROM entries WHERE scope = 'guard' AND kind = 'belief'").fetchall()
    assert [row[0] for row in rows] == [canonical_json(plain.scope("guard").beliefs[0]).decode("utf-8")]


def test_designer_registration_marks_beliefs_the_new_facts_contradict(plain: MemoryStore) -> None:
    assert plain.apply([believe("guard", "king", "The king is called Edward the Bold.")]).committed
    result = plain.register_npc(guard_profile())  # the full guard: its facts now include king_name
    assert result.committed and [c.fact_id for c in result.contradicted] == ["king_name"]
    assert beliefs(plain) == {"king": True}
    again = plain.register_npc(guard_profile())  # nothing new: nothing is checked or marked again
    assert again.committed and again.contradicted == ()
    assert plain.counters["beliefs_contradicted"] == 1


def test_a_world_fact_reaches_the_beliefs_of_every_npc(plain: MemoryStore) -> None:
    other = PLAIN_GUARD.model_copy(update={"id": "smith", "name": "Hilda"})
    assert plain.register_npc(other).committed
    assert plain.apply(
        [
            believe("guard", "king", "The king is named Edward."),
            believe("smith", "ruler", "His name is Edward, and the king is named Edward."),
            believe("smith", "weather", "It will rain."),
        ]
    ).committed
    world = eldmoor_world(canonical_facts=[*eldmoor_world().model_dump(mode="json")["canonical_facts"], KING_ARTHUR])
    result = plain.load_world(world)
    assert result.committed
    assert [(c.scope, c.belief_id) for c in result.contradicted] == [("guard", "king"), ("smith", "ruler")]
    assert beliefs(plain) == {"king": True} and beliefs(plain, "smith") == {"ruler": True, "weather": False}


@pytest.mark.parametrize(
    "content",
    ["The king is named Arthur.", "The king is not named Edward.", "Edward was a good man.", "The queen is named Edwina."],
)
def test_beliefs_consistent_with_canon_stay_live(plain: MemoryStore, content: str) -> None:
    assert plain.apply([add_fact("guard", KING_ARTHUR), believe("guard", "b", content)]).committed
    assert beliefs(plain) == {"b": False}
    assert "beliefs_contradicted" not in plain.counters


def test_rewriting_a_contradicted_belief_consistently_lifts_the_mark(plain: MemoryStore) -> None:
    assert plain.apply([add_fact("guard", KING_ARTHUR), believe("guard", "king", "The king is named Edward.")]).committed
    assert beliefs(plain) == {"king": True}
    result = plain.apply([believe("guard", "king", "The king is named Arthur after all.")])
    assert result.committed and result.contradicted == ()
    assert beliefs(plain) == {"king": False}


def test_marking_assigns_no_sequence_number(plain: MemoryStore) -> None:
    writes = [
        believe("guard", "king", "The king is named Edward."),
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=AppendEpisodic(scope="guard", text="Met a traveller.", significance=0.5, at_interaction=0),
        ),
    ]
    assert plain.apply([add_fact("guard", KING_ARTHUR)]).committed
    marked = plain.apply(writes)
    with MemoryStore(plain.path.with_name("twin.sqlite")) as twin:
        assert twin.load_world(eldmoor_world()).committed and twin.register_npc(PLAIN_GUARD).committed
        assert twin.apply([add_fact("guard", KING_ARTHUR)]).committed
        unmarked = twin.apply([believe("guard", "king", "The king is named Arthur."), writes[1]])
        assert marked.seq_range == unmarked.seq_range
        assert [e.id for e in plain.scope("guard").episodic] == [e.id for e in twin.scope("guard").episodic]


def test_a_refused_batch_marks_nothing(plain: MemoryStore) -> None:
    assert plain.apply([believe("guard", "king", "The king is named Edward.")]).committed
    before = plain.memory_hash()
    bad = MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=SetWorldState(scope=WORLD_SCOPE, key="alarm", value=True))
    result = plain.apply([add_fact("guard", KING_ARTHUR), bad])
    assert not result.committed and result.refusals[0].code is RefusalCode.AUTHORITY
    assert result.contradicted == ()
    assert plain.memory_hash() == before and beliefs(plain) == {"king": False}
    assert "beliefs_contradicted" not in plain.counters


def test_the_mark_is_stored_and_hashed_like_any_field(plain: MemoryStore, store_path: Path) -> None:
    assert plain.apply([believe("guard", "king", "The king is named Edward.")]).committed
    unmarked = plain.memory_hash()
    assert plain.apply([add_fact("guard", KING_ARTHUR)]).committed
    marked = plain.memory_hash()
    assert marked != unmarked
    # The incremental hash equals one from scratch, and one from the rows on disk.
    assert marked == memory_hash((plain.scope(name) for name in (WORLD_SCOPE, "guard")), next_seq=plain.next_seq)
    plain.close()
    with MemoryStore(store_path) as reopened:
        assert reopened.memory_hash() == marked and beliefs(reopened) == {"king": True}
