"""The disk tier of evaluated prompts, without a model: the file format, every reason a file is
not loaded (each rebuilt, with one log line), the size cap and shipped folders."""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import replace
from pathlib import Path

import pytest

from loreguard.server.inference.prompt_states import (
    PromptState,
    PromptStateStore,
    StateFileError,
    StateMaker,
    decode,
    encode,
    file_name,
    model_sha256,
    state_files,
)

MAKER = StateMaker(model_sha256="a" * 64, llama_build="0.3.36", kv_layout="k=f16 v=f16 fa=-1", device="cpu layers=0", n_batch=512)


def entry(
    owner: str = "guard", tokens: list[int] | None = None, *, exact: int = 0, maker: StateMaker = MAKER, size: int = 64
) -> PromptState:
    tokens = tokens if tokens is not None else list(range(1, 11))
    return PromptState(owner=owner, tokens=array("i", tokens), state=bytes(range(256))[:size] * 4, maker=maker, exact=exact)


def saved(store: PromptStateStore, *entries: PromptState) -> PromptStateStore:
    for item in entries:
        store.save(item)
    store.flush()
    return store


def test_a_state_file_round_trips_byte_for_byte() -> None:
    original = entry(exact=10)
    data = encode(original)
    back = decode(data)
    assert back == original and encode(back) == data


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda d: d[:-7], "truncated"),
        (lambda d: d[:20], "truncated"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "corrupt"),
        (lambda d: b"LGKV0\n" + d[6:], "not a Loreguard prompt state"),
        (lambda d: d + b"x", "trailing bytes"),
    ],
)
def test_a_damaged_file_is_refused_with_its_reason(damage, why: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StateFileError, match=why):
        decode(damage(encode(entry())))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"model_sha256": "b" * 64}, "another model file"),
        ({"llama_build": "0.3.35"}, "another llama.cpp build"),
        ({"kv_layout": "k=q8_0 v=q8_0 fa=-1"}, "another KV cache layout"),
    ],
)
def test_a_file_made_under_another_maker_is_rebuilt_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: dict[str, str], why: str
) -> None:
    other = replace(MAKER, **change)
    saved(PromptStateStore(tmp_path, other), entry(maker=other))
    store = PromptStateStore(tmp_path, MAKER)
    with caplog.at_level(logging.WARNING, "loreguard.prompt_states"):
        assert store.find("guard", array("i", range(1, 20)), prefix=5) == (None, 0)
    assert store.stats.rebuilt == 1 and store.stats.loaded == 0
    assert not (tmp_path / file_name("guard")).exists()  # deleted: the next save replaces it
    (record,) = caplog.records
    assert why in record.getMessage() and "guard" in record.getMessage()


def test_a_file_of_another_prefix_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = saved(PromptStateStore(tmp_path, MAKER), entry(tokens=[1, 2, 3, 4, 5, 6]))
    with caplog.at_level(logging.WARNING, "loreguard.prompt_states"):
        # The static prefix is 5 tokens; the file shares only 3 of them: a profile edit.
        assert store.find("guard", array("i", [1, 2, 3, 9, 9, 9, 9]), prefix=5) == (None, 0)
    assert "another prompt" in caplog.records[0].getMessage()
    assert state_files(tmp_path) == []


def test_find_gives_the_shared_start_and_find_exact_only_this_engines_own_make(tmp_path: Path) -> None:
    store = saved(PromptStateStore(tmp_path, MAKER), entry(tokens=[1, 2, 3, 4, 5, 6, 7, 8], exact=5))
    found, n = store.find("guard", array("i", [1, 2, 3, 4, 5, 6, 0, 0]), prefix=5)
    assert found is not None and n == 6 and found.exact == 5
    assert store.find_exact("guard", [1, 2, 3, 4, 5]) == found
    assert store.find_exact("guard", [1, 2, 3, 4]) is None  # evaluated in other chunks: not exact
    # The same prompt made on another device is fine for the batched engine, not the reproducible one.
    other = PromptStateStore(tmp_path, replace(MAKER, device="vulkan:0 layers=-1"))  # same model, build, layout
    assert other.find_exact("guard", [1, 2, 3, 4, 5]) is None
    assert other.find("guard", array("i", [1, 2, 3, 4, 5, 6]), prefix=5)[1] == 6
    assert state_files(tmp_path)  # not deleted: only the reproducible engine could not use it


def test_another_owners_file_is_never_read(tmp_path: Path) -> None:
    store = saved(PromptStateStore(tmp_path, MAKER), entry(owner="merchant"))
    assert store.find("guard", array("i", range(1, 11)), prefix=5) == (None, 0)
    assert file_name("guard") != file_name("merchant") and file_name("a/b") != file_name("a_b")


def test_the_cache_keeps_within_its_budget_least_recently_used_out(tmp_path: Path) -> None:
    one = len(encode(entry(size=64)))
    store = PromptStateStore(tmp_path, MAKER, budget_bytes=2 * one + 10)
    saved(store, entry("a"), entry("b"))
    os.utime(tmp_path / file_name("a"), ns=(1, 1))
    os.utime(tmp_path / file_name("b"), ns=(2, 2))
    assert store.find("a", array("i", range(1, 11)), prefix=5)[1] == 10  # a is used: now the newest
    saved(store, entry("c"))
    assert sorted(p.name for p in state_files(tmp_path)) == sorted([file_name("a"), file_name("c")])
    assert store.stats.evicted == 1 and store.stats.written == 3


def test_shipped_files_are_read_after_the_cache_and_never_deleted(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    saved(PromptStateStore(shipped, MAKER), entry(tokens=[1, 2, 3, 4, 5, 6]))
    store = PromptStateStore(tmp_path / "cache", MAKER, shipped=(shipped,))
    assert store.find("guard", array("i", [1, 2, 3, 4, 5, 6, 7]), prefix=5)[1] == 6
    assert store.find("guard", array("i", [9, 9, 9, 9, 9, 9]), prefix=5) == (None, 0)
    assert state_files(shipped)  # another prompt: skipped, not deleted
    saved(store, entry(tokens=[9, 9, 9, 9, 9, 9]))
    assert store.find("guard", array("i", [9, 9, 9, 9, 9, 9, 1]), prefix=5)[1] == 6  # the cache's own, first


def test_a_write_replaces_atomically_and_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    store = saved(PromptStateStore(tmp_path, MAKER), entry(tokens=[1, 2, 3]))
    blocked = PromptStateStore(tmp_path / file_name("guard") / "no", MAKER)  # a file where a folder should be
    saved(blocked, entry(tokens=[4, 5, 6]))
    assert blocked.stats.write_failures == 1
    assert [p.name for p in tmp_path.iterdir()] == [file_name("guard")]  # no temporary left behind
    assert store.find("guard", array("i", [1, 2, 3, 4]), prefix=3)[1] == 3


def test_the_model_hash_is_read_once(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(1000))
    memo = tmp_path / "cache" / "model-sha256.json"
    first = model_sha256(model, memo)
    memo.write_text(memo.read_text().replace(first, "f" * 64))
    assert model_sha256(model, memo) == "f" * 64  # remembered, not read again
    model.write_bytes(b"GGUF" + bytes(1001))  # another file: read again
    assert model_sha256(model, memo) not in (first, "f" * 64)


def test_a_shipped_file_of_another_prompt_never_costs_the_caches_own(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    saved(PromptStateStore(shipped, MAKER), entry(tokens=[9, 9, 9, 9, 9]))
    cache = tmp_path / "cache"
    store = saved(PromptStateStore(cache, MAKER, shipped=(shipped,)), entry(tokens=[1, 2, 3, 4, 5, 6]))  # batched-made
    # The reproducible engine finds neither usable: the cache's own is kept for the batched engine.
    assert store.find_exact("guard", [1, 2, 3, 4, 5]) is None
    assert state_files(cache) and state_files(shipped)
    assert store.stats.rebuilt == 1  # the shipped file, refused once
    assert store.find_exact("guard", [1, 2, 3, 4, 5]) is None
    assert store.stats.rebuilt == 1  # and not read again while unchanged
    assert store.find("guard", array("i", [1, 2, 3, 4, 5, 6, 7]), prefix=5)[1] == 6
