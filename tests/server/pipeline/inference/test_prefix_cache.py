"""The per-NPC prefix cache and the chat-template split, without a model."""

from __future__ import annotations

import pytest

from loreguard.server.pipeline.inference.chat_template import ChatTemplate, TemplateError
from loreguard.server.pipeline.inference.prefix_cache import PrefixCache, PrefixState


def _state(key: str, size: int) -> PrefixState:
    return PrefixState(key=key, n_tokens=size, state=b"x" * size)


def test_hit_miss_and_invalidation_on_a_new_prefix() -> None:
    cache = PrefixCache(budget_bytes=1000)
    assert cache.get("a", "k1") is None
    cache.put("a", _state("k1", 10))
    cache.put("b", _state("k2", 10))
    assert cache.get("a", "k1") is not None
    assert cache.get("a", "k1-changed") is None  # a's profile changed
    assert cache.stats.invalidations == 1
    assert cache.get("b", "k2") is not None  # b untouched
    assert (cache.stats.hits, cache.stats.misses, cache.stats.entries, cache.stats.bytes) == (2, 2, 1, 10)


def test_least_recently_used_is_evicted_under_the_budget() -> None:
    cache = PrefixCache(budget_bytes=30)
    for npc in "abc":
        cache.put(npc, _state(npc, 10))
    assert cache.get("a", "a") is not None  # a is now the most recent
    cache.put("d", _state("d", 10))
    assert cache.cached_npcs() == ["c", "a", "d"]
    assert cache.stats.evictions == 1 and cache.stats.bytes == 30


def test_a_state_larger_than_the_budget_is_not_kept() -> None:
    cache = PrefixCache(budget_bytes=5)
    cache.put("a", _state("a", 10))
    assert cache.cached_npcs() == [] and cache.stats.bytes == 0


def test_explicit_invalidation() -> None:
    cache = PrefixCache(budget_bytes=100)
    cache.put("a", _state("a", 10))
    assert cache.invalidate("a") and not cache.invalidate("a")
    assert cache.stats.bytes == 0


@pytest.mark.parametrize(
    ("template", "prefix", "suffix"),
    [
        ("chatml", "<|im_start|>system\nSTATIC", "<|im_end|>\n<|im_start|>user\nDYNAMIC<|im_end|>\n<|im_start|>assistant\n"),
        ("gemma", "<bos><start_of_turn>user\nSTATIC", "\n\nDYNAMIC<end_of_turn>\n<start_of_turn>model\n"),
    ],
)
def test_templates_split_right_after_the_static_prefix(template: str, prefix: str, suffix: str) -> None:
    split = ChatTemplate(template, bos_token="<bos>").render("STATIC", "DYNAMIC")
    assert (split.prefix, split.suffix) == (prefix, suffix)


def test_the_prefix_does_not_depend_on_the_suffix() -> None:
    template = ChatTemplate("chatml")
    assert template.render("S", "one").prefix == template.render("S", "two").prefix


def test_a_template_that_rewrites_the_system_message_is_refused() -> None:
    template = ChatTemplate("{% for m in messages %}{{ m['content'] | upper }}{% endfor %}")
    with pytest.raises(TemplateError):
        template.render("static", "dynamic")
