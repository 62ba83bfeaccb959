"""Batch sampling on the host (`sampling.sample_rows`) and the grammar's token masks
(`token_masks`): the penalties as llama.cpp defines them, DRY, the draw, masks that accept exactly
what llama.cpp's own grammar sampler accepts, and a row that fails without failing its batch."""

from __future__ import annotations

import ctypes
import json

import llama_cpp
import numpy as np
import pytest

from loreguard.schemas.prevention import Banned, DialogueConstraints
from loreguard.server.inference.dialogue_guard import DialogueGuard
from loreguard.server.inference.grammar import compile_schema
from loreguard.server.inference.llama_backend import LlamaCppBackend
from loreguard.server.inference.llama_native import NativeError
from loreguard.server.inference.sampling import WINDOW, SamplingParams, SamplingTimes, TokenSampler, sample_rows
from loreguard.server.inference.token_masks import MaskVocabulary, mask_words

pytestmark = pytest.mark.model

SCHEMA = {
    "type": "object",
    "properties": {
        "dialogue": {"type": "string", "maxLength": 40},
        "emotion": {"enum": ["neutral", "happy"]},
    },
    "required": ["dialogue", "emotion"],
}
FREE = SamplingParams(temperature=0.7, top_k=40, top_p=0.95)


class Logits:
    """A stand-in for a context after a decode: `logits_rows` returns these rows."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows.astype(np.float32)

    def logits_rows(self, rows: list[int]) -> np.ndarray:
        return self.rows[rows].copy()


@pytest.fixture(scope="module")
def vocabulary(reproducible_backend: LlamaCppBackend) -> MaskVocabulary:
    return reproducible_backend.vocabulary


def _flat(vocabulary: MaskVocabulary, favourite: dict[int, float] | None = None) -> np.ndarray:
    row = np.full(vocabulary.n_vocab, -20.0, dtype=np.float32)
    for token, logit in (favourite or {}).items():
        row[token] = logit
    return row


def test_the_repetition_penalties_are_llama_cpps(vocabulary: MaskVocabulary) -> None:
    """A positive logit is divided by the repeat penalty and a negative one multiplied; then
    frequency (per count) and presence (once) are taken off."""
    params = SamplingParams(repeat_last_n=8, repeat_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    sampler = TokenSampler(vocabulary, params, seed=1)
    sampler.force([10, 10, 11])
    row = _flat(vocabulary, {10: 4.0, 11: -2.0, 12: 3.0})
    sampler._adjust(row)
    assert row[10] == pytest.approx(4.0 / 2.0 - 2 * 0.5 - 0.25)
    assert row[11] == pytest.approx(-2.0 * 2.0 - 0.5 - 0.25)
    assert row[12] == 3.0  # never said: untouched


def test_dry_penalises_the_token_that_would_extend_a_repeat(vocabulary: MaskVocabulary) -> None:
    """After "a b c d ... a b c", `d` would make the repeat 4 long: it loses
    multiplier * base ** (3 - allowed); a breaker in the way stops the match."""
    words = [t for t in range(200, 400) if not vocabulary.breaker_flags[t]][:6]
    a, b, c, d, e, f = words
    params = SamplingParams(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, dry_last_n=64)
    sampler = TokenSampler(vocabulary, params, seed=1)
    sampler.force([a, b, c, d, e, f, a, b, c])
    assert sampler._dry_penalties() == {d: pytest.approx(0.8 * 1.75 ** (3 - 2))}
    breaker = next(t for t in range(vocabulary.n_vocab) if vocabulary.breaker_flags[t])
    broken = TokenSampler(vocabulary, params, seed=1)
    broken.force([a, breaker, c, d, e, f, a, b, c])  # only "c" repeats before the breaker: too short
    assert broken._dry_penalties() == {}


def test_lines_said_before_count_for_dry(vocabulary: MaskVocabulary) -> None:
    words = [t for t in range(200, 400) if not vocabulary.breaker_flags[t]][:4]
    newline = next(t for t in range(vocabulary.n_vocab) if vocabulary.breaker_flags[t])
    params = SamplingParams(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, dry_last_n=64)
    told = TokenSampler(vocabulary, params, seed=1, said_before=[[*words, newline]])
    told.force(words[:3])
    assert set(told._dry_penalties()) == {words[3]}
    untold = TokenSampler(vocabulary, params, seed=1)
    untold.force(words[:3])
    assert untold._dry_penalties() == {}


def test_the_draw_keeps_to_top_k_and_top_p_and_follows_the_seed(vocabulary: MaskVocabulary) -> None:
    logits = _flat(vocabulary, {5: 3.0, 6: 2.0, 7: 1.0, 8: -1.0, 9: -15.0})
    ctx = Logits(logits[None, :])

    def draws(params: SamplingParams, seed: int, n: int = 600) -> list[int]:
        sampler = TokenSampler(vocabulary, params, seed=seed)
        return [sample_rows(ctx, [(sampler, 0)])[0] for _ in range(n)]  # type: ignore[misc]

    picked = draws(SamplingParams(temperature=1.0, top_k=3, top_p=1.0), seed=7)
    assert set(picked) == {5, 6, 7}  # top-k 3
    shares = [picked.count(t) / len(picked) for t in (5, 6, 7)]
    expected = np.exp([3.0, 2.0, 1.0]) / np.exp([3.0, 2.0, 1.0]).sum()
    assert np.allclose(shares, expected, atol=0.06)
    assert set(draws(SamplingParams(temperature=1.0, top_k=40, top_p=0.5), seed=7)) == {5}  # 5 holds 0.64
    assert draws(FREE, seed=3) == draws(FREE, seed=3) and draws(FREE, seed=3) != draws(FREE, seed=4)
    greedy = draws(SamplingParams(temperature=0.0), seed=3, n=5)
    assert greedy == [5] * 5
    # A token far below the best is never drawn, whatever the settings (the window's floor).
    assert 9 not in draws(SamplingParams(temperature=5.0, top_k=0, top_p=1.0), seed=1, n=2000)
    assert -15.0 < 3.0 - WINDOW


def _matcher_sampler(vocabulary: MaskVocabulary, seed: int = 0) -> TokenSampler:
    return TokenSampler(vocabulary, FREE, seed=seed, grammar=compile_schema(SCHEMA).gbnf)


def test_a_row_takes_only_what_the_grammar_allows_even_against_the_model(
    reproducible_backend: LlamaCppBackend, vocabulary: MaskVocabulary
) -> None:
    """The model's favourite tokens are all refused ("{" must come first): the row reads its
    whole mask and takes the allowed token; the unconstrained row beside it takes its favourite."""
    model = reproducible_backend.native_model
    brace = model.tokenize("{", add_special=False)
    assert len(brace) == 1
    favourite = model.tokenize(" hello", add_special=False)[0]
    rows = np.stack([_flat(vocabulary, {favourite: 30.0, brace[0]: -25.0}), _flat(vocabulary, {favourite: 30.0})])
    constrained, free = _matcher_sampler(vocabulary), TokenSampler(vocabulary, SamplingParams(temperature=0.0), seed=0)
    times = SamplingTimes()
    tokens = sample_rows(Logits(rows), [(constrained, 0), (free, 1)], times)
    assert tokens[1] == favourite and constrained.full_filters == 1
    assert model.piece(tokens[0]).startswith(b"{")  # "{" or a token beginning with it
    assert times.rows == 2 and times.host_s > 0


def test_a_failed_grammar_fails_its_row_only(vocabulary: MaskVocabulary) -> None:
    broken, fine = _matcher_sampler(vocabulary), TokenSampler(vocabulary, SamplingParams(temperature=0.0), seed=0)
    broken.matcher.native.consume_token(vocabulary.n_vocab - 1)  # type: ignore[union-attr]  # refused: error state
    rows = np.stack([_flat(vocabulary, {42: 5.0}), _flat(vocabulary, {43: 5.0})])
    failed, taken = sample_rows(Logits(rows), [(broken, 0), (fine, 1)])
    assert isinstance(failed, NativeError) and taken == 43
    with pytest.raises(NativeError, match="grammar"):
        _matcher_sampler(vocabulary).force([vocabulary.n_vocab - 1])


def _llama_accepts(backend: LlamaCppBackend, gbnf: str, text: str) -> bool:
    """Whether llama.cpp's own grammar sampler accepts `text`, token by token, and may end."""
    model = backend.native_model
    grammar = llama_cpp.llama_sampler_init_grammar(model.vocab, gbnf.encode(), b"root")
    probe = llama_cpp.llama_token_data_array()
    data = (llama_cpp.llama_token_data * 1)()
    probe.data, probe.size, probe.sorted = data, 1, False

    def allows(token: int) -> bool:
        data[0].id, data[0].logit, data[0].p = token, 1.0, 0.0
        probe.size, probe.selected = 1, -1
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(probe))
        return data[0].logit != float("-inf")

    try:
        for token in model.tokenize(text, add_special=False):
            if not allows(token):
                return False
            llama_cpp.llama_sampler_accept(grammar, token)
        return allows(model.eos_token)
    finally:
        llama_cpp.llama_sampler_free(grammar)


def _masks_accept(backend: LlamaCppBackend, gbnf: str, text: str) -> bool:
    """Whether the masks allow every token of `text`, then an end token."""
    vocabulary = backend.vocabulary
    matcher = vocabulary.matcher(gbnf)
    mask = np.zeros((1, mask_words(vocabulary.n_vocab)), dtype=np.int32)
    for token in [*backend.native_model.tokenize(text, add_special=False), backend.native_model.eos_token]:
        vocabulary.fill([matcher], mask)
        if not (mask[0, token >> 5] >> (token & 31)) & 1:
            return False
        matcher.consume(token)
    return True


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ('{"dialogue": "Hello there, traveller.", "emotion": "happy"}', True),
        ('{"dialogue": "A quote \\" and a \\\\ slash", "emotion": "neutral"}', True),
        ('{"dialogue": "Eldmoor — ünïcode ✓", "emotion": "neutral"}', True),
        ('{"dialogue": "", "emotion": "neutral"}', True),  # no minLength in this schema
        ('{"dialogue": "Hi", "emotion": "angry"}', False),  # not in the enum
        ('{"dialogue":"Hi", "emotion": "happy"}', False),  # the grammar's separators are ": "
        ('{"dialogue": "' + "x" * 41 + '", "emotion": "happy"}', False),  # past maxLength
        ('{"dialogue": "line\nbreak", "emotion": "happy"}', False),  # a raw control character
        ('{"dialogue": "Hi", "emotion": "happy"} trailing', False),
        ('{"emotion": "happy", "dialogue": "Hi"}', False),  # properties in order
    ],
)
def test_the_masks_accept_exactly_what_llama_cpps_grammar_accepts(
    reproducible_backend: LlamaCppBackend, text: str, valid: bool
) -> None:
    gbnf = compile_schema(SCHEMA).gbnf
    assert _llama_accepts(reproducible_backend, gbnf, text) is valid
    assert _masks_accept(reproducible_backend, gbnf, text) is valid


def test_a_mask_never_allows_a_token_that_writes_nothing(reproducible_backend: LlamaCppBackend) -> None:
    """Every allowed token adds a byte, so the grammar's `max_tokens` bound holds (an output can
    never be cut off): along a whole real generation, each mask's tokens all have text."""
    vocabulary = reproducible_backend.vocabulary
    model = reproducible_backend.native_model
    empty = np.array([not model.piece(t) and not model.is_end_of_generation(t) for t in range(vocabulary.n_vocab)])
    matcher = vocabulary.matcher(compile_schema(SCHEMA).gbnf)
    mask = np.zeros((1, mask_words(vocabulary.n_vocab)), dtype=np.int32)
    text = '{"dialogue": "Hello there.", "emotion": "neutral"}'
    for token in model.tokenize(text, add_special=False):
        vocabulary.fill([matcher], mask)
        allowed = np.unpackbits(mask[0].view(np.uint8), bitorder="little")[: vocabulary.n_vocab].astype(bool)
        assert not (allowed & empty).any()
        matcher.consume(token)
    assert json.loads(text)  # the walk above was a real output


DRAGON = DialogueConstraints(banned=(Banned(rule_id="no_dragon", phrase="dragon"),))


def _guarded_sampler(reproducible_backend: LlamaCppBackend, vocabulary: MaskVocabulary) -> TokenSampler:
    """A sampler whose output so far is `{"dialogue": "There is a`, guarded against "dragon"."""
    sampler = TokenSampler(
        vocabulary, FREE, seed=0, grammar=compile_schema(SCHEMA).gbnf, guard=DialogueGuard(DRAGON, vocabulary.pieces)
    )
    sampler.force(reproducible_backend.native_model.tokenize('{"dialogue": "There is a', add_special=False))
    return sampler


def test_the_guard_draws_again_without_the_token_it_refuses(
    reproducible_backend: LlamaCppBackend, vocabulary: MaskVocabulary
) -> None:
    """The model's favourite is " dragon", its second " wolf": the row takes the wolf, and the
    sampler says what it kept out and why."""
    model = reproducible_backend.native_model
    [dragon], [wolf] = model.tokenize(" dragon", add_special=False), model.tokenize(" wolf", add_special=False)
    sampler = _guarded_sampler(reproducible_backend, vocabulary)
    assert sampler.sample(Logits(_flat(vocabulary, {dragon: 30.0, wolf: 28.0})[None, :])) == wolf  # type: ignore[arg-type]
    [prevented] = sampler.guard.prevented()  # type: ignore[union-attr]
    assert (prevented.rule_id, prevented.evidence, prevented.refused) == ("no_dragon", "dragon", 1)


def test_the_guard_lets_the_token_through_when_nothing_else_is_in_the_window(
    reproducible_backend: LlamaCppBackend, vocabulary: MaskVocabulary
) -> None:
    """Every other token is far below the window: nothing the model would write is left, so the
    token goes through and the gate decides (the guard prevents; it never forces nonsense)."""
    [dragon] = reproducible_backend.native_model.tokenize(" dragon", add_special=False)
    sampler = _guarded_sampler(reproducible_backend, vocabulary)
    assert sampler.sample(Logits(_flat(vocabulary, {dragon: 30.0})[None, :])) == dragon  # type: ignore[arg-type]
