"""Long-term memory: the keyword index, relevance over it, and consolidation past the limit."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from factories import guard_profile
from pydantic import ValidationError

from loreguard.memory import MemoryPolicy, MemoryStore, RetrievalQuery, retrieve_episodic
from loreguard.memory.recall import RecallIndex
from loreguard.schemas import AppendEpisodic, Authority, MemoryKind, MemoryWrite, RemoveEntry
from loreguard.schemas.memory import EpisodicEntry

_WORDS = "river gate compass sister ledger rain market wolves mill chapel bread boots king road night".split()


def _entry(seq: int, text: str, significance: float = 0.3, at: int = 0) -> EpisodicEntry:
    return EpisodicEntry(
        id=f"ep{seq}", seq=seq, text=text, significance=significance, at_interaction=at, source=Authority.VALIDATED_OUTPUT
    )


def _same(a: RecallIndex, b: RecallIndex) -> None:
    assert dict(a.postings) == dict(b.postings)
    assert sorted(a.postings) == sorted(b.postings)
    assert dict(a.words) == dict(b.words)
    assert a.total_words == b.total_words


def test_an_index_kept_in_step_equals_one_built_afresh() -> None:
    """Appends and removals in any mix leave the index a fresh build of the survivors would be,
    and every earlier index as it was (a view taken before a commit keeps reading its own)."""
    rng = random.Random(3)
    live: dict[int, EpisodicEntry] = {}
    index = RecallIndex()
    seq = 0
    for _ in range(300):
        before, snapshot = index, RecallIndex.of(live.values())
        added = []
        for _ in range(rng.randrange(0, 4)):
            seq += 1
            added.append(_entry(seq, " ".join(rng.sample(_WORDS, rng.randrange(1, 6)))))
        removed = rng.sample(sorted(live), min(len(live), rng.randrange(0, 3)))
        index = index.changed(added=added, removed=removed)
        for gone in removed:
            del live[gone]
        live.update((e.seq, e) for e in added)
        _same(index, RecallIndex.of(live.values()))
        _same(before, snapshot)


def test_a_rare_word_outweighs_a_common_one() -> None:
    """BM25's rarity: the one memory naming Kalix beats forty naming the compass alone."""
    entries = [_entry(i, f"The player asked whether I sell a compass, day {i}.") for i in range(1, 41)]
    entries.append(_entry(41, "The player's sister Kalix hid a ledger under the mill."))
    scores = RecallIndex.of(entries).relevance(frozenset({"kalix", "compass", "sister"}))
    assert max(scores, key=lambda seq: (scores[seq], seq)) == 41
    assert all(0.0 < score <= 1.0 for score in scores.values())


def test_retrieval_brings_back_an_old_memory_the_player_asks_about() -> None:
    """Told at interaction 1, asked about at 2,000 among hundreds of newer memories that share
    some of its words: it is the first memory the prompt holds."""
    told = _entry(1, 'Player: "My sister Kalix hid the compass under the mill in Vorsa." / Guard: "I will remember."')
    chatter = [
        _entry(seq, f"The player asked about a compass for sale and the {_WORDS[seq % len(_WORDS)]}.", 0.4, at=seq)
        for seq in range(2, 500)
    ]
    query = RetrievalQuery(player_input="Where did my sister Kalix hide the compass?", now_interaction=2_000, max_episodic=6)
    found = retrieve_episodic([told, *chatter], query)
    assert found[0][0] == told


def test_an_old_memory_nothing_calls_for_stays_out() -> None:
    """Only the newest memories come back whatever the player says; an old one needs a word of
    the player's line (retrieval's cost does not grow with the store)."""
    old = _entry(1, "A merchant sold me a lantern.", significance=1.0)
    newer = [_entry(seq, f"Rain fell on the road, day {seq}.", at=seq) for seq in range(2, 200)]
    query = RetrievalQuery(player_input="Nice boots.", now_interaction=200, max_episodic=6)
    assert old not in [e for e, _ in retrieve_episodic([old, *newer], query)]
    asked = RetrievalQuery(player_input="Who sold you the lantern?", now_interaction=200, max_episodic=6)
    assert retrieve_episodic([old, *newer], asked)[0][0] == old


def _append(store: MemoryStore, text: str, at: int, significance: float = 0.3) -> None:
    op = AppendEpisodic(scope="guard", text=text, significance=significance, at_interaction=at)
    assert store.apply([MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=op)]).committed


def test_a_long_game_keeps_memory_bounded_and_the_telling_memory_in_it(tmp_path: Path) -> None:
    """Two thousand lines of small talk through a limit of 64: memory never passes the limit,
    the one line that said something new survives every consolidation, and the store's index
    stays what a fresh build of its memory would be (after a reopen and a slot load too)."""
    path = tmp_path / "m.sqlite"
    policy = MemoryPolicy(episodic_limit=64)
    with MemoryStore(path, policy=policy) as store:
        store.register_npc(guard_profile())
        _append(store, "The player said his sister Kalix hid the compass under the mill in Vorsa.", 0)
        for i in range(1, 2_000):
            _append(store, f"The player asked about the {_WORDS[i % len(_WORDS)]} and the {_WORDS[i * 7 % len(_WORDS)]}.", i)
            assert len(store.scope("guard").episodic) <= 64
            if i % 500 == 0:
                store.slots.save(f"at{i}")
        texts = [e.text for e in store.scope("guard").episodic]
        assert any("Kalix" in text for text in texts)
        _same(store.view("guard").recall, RecallIndex.of(store.scope("guard").episodic))
        store.slots.load("at1000")
        _same(store.view("guard").recall, RecallIndex.of(store.scope("guard").episodic))
        final = store.memory_hash()
    with MemoryStore(path, policy=policy) as reopened:
        assert reopened.memory_hash() == final
        _same(reopened.view("guard").recall, RecallIndex.of(reopened.scope("guard").episodic))


def test_removing_an_episode_keeps_the_index_in_step(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "m.sqlite") as store:
        store.register_npc(guard_profile())
        for i in range(5):
            _append(store, f"The {_WORDS[i]} was mentioned.", i)
        store.view("guard")  # the index exists from here on, and commits keep it in step
        doomed = store.scope("guard").episodic[2].id
        op = RemoveEntry(scope="guard", kind=MemoryKind.EPISODIC, entry_id=doomed)
        assert store.apply([MemoryWrite(source=Authority.GAME_SYSTEM, op=op)]).committed
        _same(store.view("guard").recall, RecallIndex.of(store.scope("guard").episodic))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"consolidate_oldest": 8, "consolidate_keep": 8}, "must be below consolidate_oldest"),
        ({"episodic_limit": 10, "consolidate_oldest": 20}, "must be at most episodic_limit"),
        ({"consolidate_oldest": 0}, "greater than or equal to 1"),
        ({"consolidate_keep": -1}, "greater than or equal to 0"),
    ],
)
def test_a_consolidation_that_frees_nothing_is_refused(settings: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MemoryPolicy.model_validate(settings)


def test_default_consolidation_fits_any_limit() -> None:
    for limit in (1, 2, 3, 8, 60, 512, 100_000):
        policy = MemoryPolicy(episodic_limit=limit)
        assert 0 <= policy.consolidation_keep < policy.consolidation_block <= limit


def test_one_memory_per_thing_said() -> None:
    """Ten answers to the same question are one memory in the prompt; the places go to other things."""
    same = [_entry(seq, f'Player: "How is the weather?" / Guard: "Rain, day {seq}."', at=seq) for seq in range(1, 11)]
    other = [_entry(11, 'Player: "Where is the mill?" / Guard: "North."', at=1)]
    query = RetrievalQuery(player_input="How is the weather?", now_interaction=12, max_episodic=6)
    found = retrieve_episodic([*same, *other], query, said=lambda e: e.text.split(" / ")[0])
    assert [e.seq for e, _ in found] == [10, 11]  # the newest answer, then the other memory


def test_the_topic_an_npc_talks_about_most_can_still_be_recalled() -> None:
    """A word in most of an NPC's memories weighs little, but when it is the only word the player
    asked about, the memories holding it are the ones called for (it once dropped out)."""
    castle = [
        "The castle's west tower leaks when it rains.",
        "The player asked about the castle kitchens.",
        "A banner fell from the castle wall at dawn.",
        "The castle guard changes at the ninth bell.",
        "The king dines in the castle's great hall.",
        "Rats got into the castle granary.",
        "The castle well was cleaned last spring.",
    ]
    other = [
        "The miller's daughter sold bread by the river.",
        "Wolves were heard on the north road.",
        "The chapel bell cracked in the frost.",
        "A peddler sold boots at the market.",
        "The ferry ran late because of fog.",
        "The blacksmith bought new bellows.",
    ]
    entries = [_entry(i, text, at=i) for i, text in enumerate(castle + other, start=1)]
    query = RetrievalQuery(player_input="Tell me about the castle", max_episodic=6)
    chosen = [entry.text for entry, _ in retrieve_episodic(entries, query)]
    assert len(chosen) == 6
    assert all("castle" in text for text in chosen), chosen


def test_a_word_in_every_memory_scores_only_the_most_relevant_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retrieval's cost stays bounded: a word in all of a thousand memories brings at most
    RELEVANT_CANDIDATES of them besides the newest, and the query still answers."""
    from loreguard.memory import retrieval

    entries = [_entry(i, f"The player passed the gate, day {i}.", at=i) for i in range(1, 1001)]
    scored: list[int] = []
    original = retrieval._score_episodes

    def counting(candidates, *rest):
        scored.append(len(candidates))
        return original(candidates, *rest)

    monkeypatch.setattr(retrieval, "_score_episodes", counting)
    chosen = retrieve_episodic(entries, RetrievalQuery(player_input="the gate", max_episodic=4))
    assert len(chosen) == 4
    assert scored == [retrieval.RECENT_CANDIDATES + retrieval.RELEVANT_CANDIDATES], scored
