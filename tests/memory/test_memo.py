"""The identity memo (memory/memo.py) and the faster forms of pruning and scoring: each must
give exactly what the plain computation gives, and a memo must never answer for another object."""

from __future__ import annotations

import random
from pathlib import Path

from factories import eldmoor_world, guard_profile

from loreguard.memory import MemoryPolicy, MemoryStore, RetrievalQuery, episodic_strength, memory_hash
from loreguard.memory.memo import IdentityMemo
from loreguard.memory.policy import episodic_strengths
from loreguard.memory.recall import RecallIndex
from loreguard.memory.retrieval import RELEVANCE_FLOOR, keywords, retrieve_episodic
from loreguard.memory.transitions import _prune_episodic, _Scratch
from loreguard.schemas import (
    WORLD_SCOPE,
    AppendEpisodic,
    Authority,
    EpisodicEntry,
    MemoryKind,
    MemoryWrite,
    RemoveEntry,
    ScopeMemory,
    UpsertBelief,
)


def test_memo_computes_once_per_object_and_never_answers_for_an_equal_one() -> None:
    memo: IdentityMemo[int] = IdentityMemo()
    calls: list[object] = []
    first = tuple(["dragon", "gate"])

    def compute(value: object) -> int:
        calls.append(value)
        return len(calls)

    assert memo.get((first,), lambda: compute(first)) == 1
    assert memo.get((first,), lambda: compute(first)) == 1
    # An equal object that is not the same one is computed again (its own entry).
    other = tuple(list(first))
    assert other == first and other is not first
    assert memo.get((other,), lambda: compute(other)) == 2
    assert len(calls) == 2


def test_memo_keys_compare_every_object_in_order() -> None:
    memo: IdentityMemo[str] = IdentityMemo()
    a, b = object(), object()
    assert memo.get((a, b), lambda: "ab") == "ab"
    assert memo.get((b, a), lambda: "ba") == "ba"
    assert memo.get((a,), lambda: "a") == "a"
    assert memo.get((a, b), lambda: "recomputed") == "ab"


def test_a_full_memo_forgets_and_recomputes() -> None:
    memo: IdentityMemo[int] = IdentityMemo(maxsize=2)
    keep = [object() for _ in range(3)]
    for i, obj in enumerate(keep):
        memo.get((obj,), lambda i=i: i)
    assert len(memo) <= 2
    assert memo.get((keep[0],), lambda: 99) == 99  # forgotten, computed afresh


def _entries(rng: random.Random, n: int) -> list[EpisodicEntry]:
    texts = ["a traveller came", "the river rose", "rain again", "landmark 3 by the river"]
    return [
        EpisodicEntry(
            id=f"ep{seq}",
            seq=seq,
            text=rng.choice(texts),
            significance=rng.choice([0.0, 0.1, 0.4, 0.5, 1.0]),
            at_interaction=rng.randrange(0, 30),
            source=Authority.VALIDATED_OUTPUT,
        )
        for seq in range(1, n + 1)
    ]


def test_strengths_of_a_scope_equal_each_entry_strength() -> None:
    entries = _entries(random.Random(3), 80)
    for now in (0, 5, 29, 40):
        assert episodic_strengths(entries, now, 0.97) == [episodic_strength(e, now, 0.97) for e in entries]


def test_consolidation_keeps_the_most_significant_of_the_oldest() -> None:
    """Past the limit, the oldest block is ranked by significance × information (ties: newer
    first) and all but the best `keep` are dropped; memory ends at or under its limit, and the
    choice does not depend on the order the entries were written in."""
    rng = random.Random(7)
    for trial in range(200):
        entries = _entries(rng, rng.randrange(2, 40))
        limit = rng.randrange(1, len(entries) + 1)
        policy = MemoryPolicy(episodic_limit=limit)
        index = RecallIndex.of(entries)
        excess = len(entries) - limit
        block = sorted(entries, key=lambda e: e.seq)[: max(policy.consolidation_block, excess)]
        keep = min(policy.consolidation_keep, len(block) - excess)
        value = {e.seq: e.significance * sum(index.idf(w) for w in sorted(keywords(e.text))) for e in block}
        ranked = sorted(block, key=lambda e: (-round(value[e.seq], 9), -e.seq))
        expected = sorted(e.id for e in ranked[keep:])
        for order in (entries, list(reversed(entries))):
            work = _Scratch(ScopeMemory(scope="npc", episodic=tuple(order)))
            dropped = [change.entry_id for change in _prune_episodic(work, policy)]
            if len(entries) <= limit:
                assert dropped == [], trial
                continue
            assert sorted(dropped) == expected, trial
            assert len(entries) - len(dropped) <= limit, trial


def test_episodic_scores_equal_the_formula() -> None:
    entries = _entries(random.Random(11), 50)
    for line in ("Tell me about the river landmark", ""):  # no keyword: relevance is 0
        _check_scores(entries, RetrievalQuery(player_input=line, now_interaction=30, max_episodic=50))


def _check_scores(entries: list[EpisodicEntry], query: RetrievalQuery) -> None:
    words = keywords(query.player_input)
    relevant = RecallIndex.of(entries).relevance(words)
    w = query.weights
    expected = {}
    for entry in entries:
        strength = episodic_strength(entry, query.now_interaction, query.decay)
        expected[entry.seq] = round(
            w.recency * min(strength / max(entry.significance, 1e-9), 1.0)
            + w.relevance * relevant.get(entry.seq, 0.0)
            + w.significance * entry.significance,
            9,
        )
    found = retrieve_episodic(entries, query)
    assert all(s == expected[e.seq] for e, s in found)
    # One memory per text, and every text there is (max_episodic is the whole memory here).
    assert sorted(e.text for e, _ in found) == sorted({e.text for e in entries})
    # Up to half the places for what the line calls for, most relevant first; then by score.
    called = [relevant.get(e.seq, 0.0) for e, _ in found[: (query.max_episodic + 1) // 2]]
    first = len([r for r in called if r >= RELEVANCE_FLOOR])
    assert called[:first] == sorted(called[:first], reverse=True)
    rest = [s for _, s in found[first:]]
    assert rest == sorted(rest, reverse=True)


def test_kept_hash_lines_give_the_hash_of_memory_recomputed(tmp_path: Path) -> None:
    """The store keeps each scope's sorted hash lines across commits (appends, pruning,
    rewritten and removed entries); its hashes always equal hashes computed from scratch, and
    a store opened afresh on the file agrees."""
    rng = random.Random(5)
    path = tmp_path / "m.sqlite"
    store = MemoryStore(path, policy=MemoryPolicy(episodic_limit=12))
    store.load_world(eldmoor_world())
    store.register_npc(guard_profile())
    npc = "guard"
    for turn in range(60):
        writes = []
        removed: set[str] = set()
        for _ in range(rng.randrange(1, 4)):
            pick = rng.random()
            if pick < 0.5:
                op = AppendEpisodic(scope=npc, text=f"note {rng.randrange(9)}", significance=rng.random(), at_interaction=turn)
            elif pick < 0.8:
                op = UpsertBelief(
                    scope=npc, belief_id=f"b{rng.randrange(5)}", content=f"thinks {rng.randrange(9)}", confidence=0.5
                )
            else:
                beliefs = [b.id for b in store.scope(npc).beliefs if b.id not in removed]
                if not beliefs or writes:  # first in its batch: no earlier write re-adds or removes it
                    continue
                op = RemoveEntry(scope=npc, kind=MemoryKind.BELIEF, entry_id=rng.choice(beliefs))
                removed.add(op.entry_id)
            writes.append(MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=op))
        assert store.apply(writes).committed
        scopes = [store.scope(name) for name in (npc, WORLD_SCOPE)]
        assert store.memory_hash() == memory_hash(scopes, next_seq=store.next_seq)
    final = store.memory_hash()
    store.close()
    with MemoryStore(path) as reopened:
        assert reopened.memory_hash() == final


def test_a_row_changed_twice_in_one_batch_is_stored_as_its_last_change(tmp_path: Path) -> None:
    """The store writes a batch's rows with one statement per action; a row removed and written
    again, or written and pruned, in one batch ends as its last change said, on disk too."""
    path = tmp_path / "m.sqlite"
    store = MemoryStore(path, policy=MemoryPolicy(episodic_limit=2))
    store.register_npc(guard_profile())

    def write(op: object) -> MemoryWrite:
        return MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=op)

    belief = UpsertBelief(scope="guard", belief_id="b1", content="first", confidence=0.5)
    assert store.apply([write(belief)]).committed
    again = UpsertBelief(scope="guard", belief_id="b1", content="second", confidence=0.5)
    removed = RemoveEntry(scope="guard", kind=MemoryKind.BELIEF, entry_id="b1")
    assert store.apply([write(removed), write(again)]).committed
    notes = [AppendEpisodic(scope="guard", text=f"note {i}", significance=0.5, at_interaction=0) for i in range(3)]
    # The third passes the limit of 2 and consolidates the oldest, written in this same batch:
    # appended, then dropped at once, never stored.
    assert store.apply([write(op) for op in notes]).committed
    assert [b.content for b in store.scope("guard").beliefs] == ["second"]
    assert [e.text for e in store.scope("guard").episodic] == ["note 1", "note 2"]
    in_ram = store.memory_hash()
    store.close()
    with MemoryStore(path) as reopened:
        assert [b.content for b in reopened.scope("guard").beliefs] == ["second"]
        assert [e.text for e in reopened.scope("guard").episodic] == ["note 1", "note 2"]
        assert reopened.memory_hash() == in_ram
