"""The per-NPC prefix cache and the chat-template split, without a model."""

from __future__ import annotations

import pytest

from loreguard.server.inference.chat_template import ChatTemplate, TemplateError
from loreguard.server.inference.prefix_cache import PrefixCache, PrefixState


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


def _chat(system: str, *turns: str) -> list[dict[str, str]]:
    """System, then alternating user and assistant messages."""
    roles = ("user", "assistant")
    return [{"role": "system", "content": system}] + [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]


@pytest.mark.parametrize(
    ("template", "prefix", "suffix"),
    [
        ("chatml", "<|im_start|>system\nSTATIC", "<|im_end|>\n<|im_start|>user\nDYNAMIC<|im_end|>\n<|im_start|>assistant\n"),
        ("gemma", "<bos><start_of_turn>user\nSTATIC", "\n\nDYNAMIC<end_of_turn>\n<start_of_turn>model\n"),
    ],
)
def test_templates_split_right_after_the_static_prefix(template: str, prefix: str, suffix: str) -> None:
    split = ChatTemplate(template, bos_token="<bos>").render(_chat("STATIC", "DYNAMIC"))
    assert (split.prefix, split.suffix) == (prefix, suffix)


@pytest.mark.parametrize("template", ["chatml", "gemma"])
def test_a_repeat_turn_continues_the_previous_prompt_and_reply(template: str) -> None:
    """The next turn's rendering starts with this turn's rendering followed by the reply, which
    is what lets the engine reuse the tokens the model generated."""
    chat = ChatTemplate(template, bos_token="<bos>")
    first = chat.render(_chat("S", "ctx hi"))
    second = chat.render(_chat("S", "ctx hi", '{"dialogue": "Hello."}', "and now?"))
    assert (second.prefix + second.suffix).startswith(first.prefix + first.suffix + '{"dialogue": "Hello."}')


def test_the_prefix_does_not_depend_on_the_suffix() -> None:
    template = ChatTemplate("chatml")
    assert template.render(_chat("S", "one")).prefix == template.render(_chat("S", "two", "r", "three")).prefix


def test_a_template_that_rewrites_the_system_message_is_refused() -> None:
    template = ChatTemplate("{% for m in messages %}{{ m['content'] | upper }}{% endfor %}")
    with pytest.raises(TemplateError):
        template.render(_chat("static", "dynamic"))


def test_a_warm_up_asks_for_room_without_evicting() -> None:
    cache = PrefixCache(budget_bytes=25)
    cache.put("a", _state("a", 10))
    assert cache.peek("a", "a") and not cache.peek("a", "other") and not cache.peek("b", "b")
    assert cache.stats.hits == cache.stats.misses == 0  # peeking is not a lookup
    assert cache.has_room("b", 15) and not cache.has_room("b", 16)
    assert cache.has_room("a", 25)  # replacing its own entry frees its bytes
    assert cache.cached_npcs() == ["a"]
