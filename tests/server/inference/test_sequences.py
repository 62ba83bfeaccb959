"""The batched engine's sequence bookkeeping, without a model: longest-prefix match, slots, LRU."""

from __future__ import annotations

from array import array

import pytest

from loreguard.server.inference.sequences import SequencePool, common_prefix


def _tokens(*values: int) -> array:
    return array("i", values)


def _fill(pool: SequencePool, owner: str, *tokens: int, finish: bool = True) -> int:
    seq, evicted = pool.acquire(owner)
    assert evicted is None
    seq.tokens = _tokens(*tokens)
    if finish:
        pool.finish(seq.seq_id)
    return seq.seq_id


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [((), (1, 2), 0), ((1, 2, 3), (1, 2, 3), 3), ((1, 2, 3), (1, 2, 4), 2), ((5,), (6,), 0), ((1, 2), (1, 2, 3, 4), 2)],
)
def test_common_prefix(a: tuple[int, ...], b: tuple[int, ...], n: int) -> None:
    assert common_prefix(_tokens(*a), _tokens(*b)) == n == common_prefix(_tokens(*b), _tokens(*a))


def test_the_longest_match_wins_and_is_capped() -> None:
    pool = SequencePool(8, 4)
    short = _fill(pool, "a", 1, 2, 9)
    long = _fill(pool, "b", 1, 2, 3, 4, 5)
    assert pool.longest_match(_tokens(1, 2, 3, 4, 7), limit=10).seq_id == long
    assert pool.longest_match(_tokens(1, 2, 3, 4, 7), limit=10).n_tokens == 4
    assert pool.longest_match(_tokens(1, 2, 9, 9), limit=10).seq_id == short
    # Capped: the last prompt token is always evaluated, for its logits.
    assert pool.longest_match(_tokens(1, 2, 3, 4, 5), limit=4).n_tokens == 4
    assert pool.longest_match(_tokens(8, 8), limit=10).seq_id is None


def test_ties_go_to_the_lowest_id_whatever_the_insertion_order() -> None:
    pool = SequencePool(8, 4)
    first = _fill(pool, "a", 1, 2, 3)
    _fill(pool, "b", 1, 2, 3)
    assert pool.longest_match(_tokens(1, 2, 3, 4), limit=10).seq_id == first


def test_an_active_sequence_is_matched_on_what_it_holds_so_far() -> None:
    pool = SequencePool(8, 4)
    active = _fill(pool, "a", 1, 2, finish=False)
    assert pool.longest_match(_tokens(1, 2, 3), limit=10).seq_id == active
    assert pool.n_active == 1 and pool.resident() == []


def test_least_recently_used_resident_is_evicted_when_ids_run_out() -> None:
    pool = SequencePool(3, 2)
    a = _fill(pool, "a", 1)
    b = _fill(pool, "b", 2)
    c = _fill(pool, "c", 3)
    pool.touch(a)  # a was just reused: b is now the oldest
    seq, evicted = pool.acquire("d")
    assert evicted is not None and evicted.seq_id == b and evicted.tokens == _tokens(2)
    assert seq.seq_id == b and pool.evictions == 1
    assert [s.seq_id for s in pool.resident()] == [c, a]


def test_the_match_about_to_be_copied_is_never_evicted() -> None:
    pool = SequencePool(2, 1)
    a = _fill(pool, "a", 1, 2)
    b = _fill(pool, "b", 3, 4)
    pool.touch(a)
    match = pool.longest_match(_tokens(3, 4, 5), limit=10)
    assert match.seq_id == b
    _, evicted = pool.acquire("c", keep=match.seq_id)
    assert evicted is not None and evicted.seq_id == a


def test_slots_bound_the_generations_at_once() -> None:
    pool = SequencePool(4, 2)
    pool.acquire("a")
    pool.acquire("b")
    with pytest.raises(RuntimeError, match="busy"):
        pool.acquire("c")


def test_forgetting_an_owner_and_clearing() -> None:
    pool = SequencePool(4, 2)
    a1 = _fill(pool, "a", 1)
    a2 = _fill(pool, "a", 2)
    _fill(pool, "b", 3)
    assert pool.owned_by("a") == sorted([a1, a2])
    pool.release(a1)
    assert pool.owned_by("a") == [a2]
    assert len(pool.clear()) == 2 and pool.resident() == []


def test_the_spill_tier_keeps_one_state_per_owner_under_its_budget() -> None:
    from loreguard.server.inference.spill import SpillCache, SpilledSequence

    spill = SpillCache(budget_bytes=25)
    spill.put(SpilledSequence("a", _tokens(1, 2, 3), b"x" * 10))
    spill.put(SpilledSequence("b", _tokens(1, 9), b"x" * 10))
    spill.put(SpilledSequence("a", _tokens(1, 2, 3, 4), b"x" * 10))  # a newer turn of a replaces the old
    assert spill.owners() == ["b", "a"] and spill.stats.bytes == 20
    entry, n = spill.best_match(_tokens(1, 2, 3, 4, 5), limit=10)
    assert entry is not None and (entry.owner, n) == ("a", 4)
    assert spill.best_match(_tokens(1, 2, 3, 4, 5), limit=2)[1] == 2
    spill.put(SpilledSequence("c", _tokens(7), b"x" * 10))  # over budget: b, the oldest, goes
    assert spill.owners() == ["a", "c"] and spill.stats.dropped == 1
    assert spill.take("a").tokens == _tokens(1, 2, 3, 4) and spill.stats.bytes == 10
    assert spill.forget("c") and not spill.forget("c") and spill.stats.bytes == 0
    spill.put(SpilledSequence("d", _tokens(1), b"x" * 30))  # larger than the budget: not kept
    assert spill.owners() == []


def test_resident_room_leaves_the_slots_their_ids() -> None:
    """A warm-up may keep another sequence only while every slot could still start a generation
    without evicting one."""
    pool = SequencePool(n_sequences=4, max_active=2)
    kept = []
    while pool.has_resident_room():
        seq, evicted = pool.acquire(f"npc{len(kept)}")
        assert evicted is None
        pool.finish(seq.seq_id)
        kept.append(seq.seq_id)
    assert len(kept) == 2  # 4 ids less the 2 the slots need
    busy, _ = pool.acquire("talking")
    assert not pool.has_resident_room()  # one slot busy, one id free: the other slot's
    pool.release(busy.seq_id)
