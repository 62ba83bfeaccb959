"""Retrieval: scored, bounded, and in the same order whatever order entries were written in."""

from __future__ import annotations

import random
from pathlib import Path

from factories import guard_profile
from stores import open_store

from loreguard.memory import MemoryPolicy, MemoryStore, RetrievalQuery, retrieve_beliefs, retrieve_episodic
from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite, UpsertBelief

EPISODES = [
    ("The player asked about the dragon in the hills.", 0.9, 3),
    ("The player paid the toll in silver.", 0.4, 5),
    ("A merchant cart broke an axle at the gate.", 0.2, 5),
    ("The player asked about the dragon again.", 0.9, 3),
    ("It rained all day.", 0.1, 1),
    ("The captain praised the guard.", 0.6, 2),
    ("Identical twin entry.", 0.5, 4),
    ("Identical twin entry.", 0.5, 4),
]
BELIEFS = [
    ("player_honest", "The player seems honest.", 0.7),
    ("dragon_real", "The dragon in the hills is real.", 0.5),
    ("captain_fair", "The captain is fair.", 0.5),
    ("rumor", "A rumor says the mayor steals.", 0.1),
]


def _filled_store(path: Path, order: list[int], belief_order: list[int]) -> MemoryStore:
    store = open_store(path, npcs=[guard_profile()])
    writes = [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=AppendEpisodic(scope="guard", text=EPISODES[i][0], significance=EPISODES[i][1], at_interaction=EPISODES[i][2]),
        )
        for i in order
    ]
    writes += [
        MemoryWrite(
            source=Authority.VALIDATED_OUTPUT,
            op=UpsertBelief(scope="guard", belief_id=BELIEFS[i][0], content=BELIEFS[i][1], confidence=BELIEFS[i][2]),
        )
        for i in belief_order
    ]
    assert store.apply(writes).committed
    return store


def _view(store: MemoryStore, query: RetrievalQuery) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    memory = store.scope("guard")
    episodes = [(e.text, s) for e, s in retrieve_episodic(memory.episodic, query)]
    beliefs = [(b.id, s) for b, s in retrieve_beliefs(memory.beliefs, query)]
    return episodes, beliefs


def test_order_is_independent_of_insertion_order(tmp_path: Path) -> None:
    query = RetrievalQuery(player_input="Tell me about the dragon", now_interaction=6, max_episodic=6, max_beliefs=3)
    rng = random.Random(7)
    views = []
    for trial in range(6):
        order = list(range(len(EPISODES)))
        belief_order = list(range(len(BELIEFS)))
        rng.shuffle(order)
        rng.shuffle(belief_order)
        with _filled_store(tmp_path / f"m{trial}.sqlite", order, belief_order) as store:
            views.append(_view(store, query))
    assert all(view == views[0] for view in views)
    episodes, beliefs = views[0]
    assert episodes[0][0].startswith("The player asked about the dragon")
    assert len(episodes) == 6
    assert [b for b, _ in beliefs] == ["dragon_real", "player_honest", "captain_fair"]


def test_threshold_and_limits(store: MemoryStore) -> None:
    store.apply(
        [
            MemoryWrite(
                source=Authority.VALIDATED_OUTPUT,
                op=UpsertBelief(scope="guard", belief_id=b[0], content=b[1], confidence=b[2]),
            )
            for b in BELIEFS
        ]
        + [
            MemoryWrite(
                source=Authority.VALIDATED_OUTPUT,
                op=UpsertBelief(scope="guard", belief_id="wrong", content="Contradicted.", confidence=0.9, contradicted=True),
            )
        ]
    )
    query = RetrievalQuery(player_input="", belief_threshold=0.5, max_beliefs=10)
    ids = [b.id for b, _ in retrieve_beliefs(store.scope("guard").beliefs, query)]
    assert "rumor" not in ids and "wrong" not in ids
    assert ids == ["player_honest", "captain_fair", "dragon_real"]


def test_past_its_limit_memory_keeps_the_significant_among_its_oldest(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "p.sqlite", policy=MemoryPolicy(episodic_limit=3, episodic_decay=0.5)) as store:
        store.register_npc(guard_profile())
        for i, (text, significance) in enumerate([("old but vital", 1.0), ("trivial", 0.1), ("medium", 0.5), ("fresh", 0.3)]):
            store.apply(
                [
                    MemoryWrite(
                        source=Authority.VALIDATED_OUTPUT,
                        op=AppendEpisodic(scope="guard", text=text, significance=significance, at_interaction=i),
                    )
                ]
            )
        kept = [e.text for e in store.scope("guard").episodic]
        # The fourth passes the limit of 3: of the two oldest (a limit of 3 consolidates two and
        # keeps one), the vital one stays however old it is.
        assert kept == ["old but vital", "medium", "fresh"]
