"""Token sampling over llama.cpp's sampler chains: the settings (`SamplingParams`), the
repetition penalties and DRY, and `TokenSampler`, which checks the sampled token against the
output grammar before it filters the whole vocabulary."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

import llama_cpp
import numpy as np

from loreguard.server.inference.llama_native import NativeContext, NativeError, NativeModel


class SamplingParams:
    """Sampling settings. Repetition penalties (llama.cpp's `penalties`: repeat, frequency,
    presence over the last `repeat_last_n` tokens) and DRY ("don't repeat yourself": a penalty
    growing with the length of a sequence that repeats an earlier one, past
    `dry_allowed_length` tokens) stop a small model's loops before the gate has to; both see
    only the tokens generated so far, never the prompt."""

    __slots__ = (
        "temperature",
        "top_k",
        "top_p",
        "repeat_last_n",
        "repeat_penalty",
        "frequency_penalty",
        "presence_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_last_n",
    )

    def __init__(
        self,
        temperature: float = 0.7,
        top_k: int = 40,
        top_p: float = 0.95,
        *,
        repeat_last_n: int = 0,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        dry_multiplier: float = 0.0,
        dry_base: float = 1.75,
        dry_allowed_length: int = 2,
        dry_last_n: int = 0,
    ) -> None:
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.repeat_last_n = repeat_last_n
        self.repeat_penalty = repeat_penalty
        self.frequency_penalty = frequency_penalty
        self.presence_penalty = presence_penalty
        self.dry_multiplier = dry_multiplier
        self.dry_base = dry_base
        self.dry_allowed_length = dry_allowed_length
        self.dry_last_n = dry_last_n

    @property
    def penalties(self) -> bool:
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0
        )

    @property
    def dry(self) -> bool:
        return self.dry_multiplier > 0.0 and self.dry_last_n != 0

    @property
    def penalised(self) -> bool:
        """Whether any sampler keeps a history of the generated tokens."""
        return self.penalties or self.dry

    def describe(self) -> dict[str, float | int]:
        """The settings as a receipt records them, in a fixed order."""
        return {name: getattr(self, name) for name in self.__slots__}


#: Where DRY stops matching a repeated sequence (llama.cpp's defaults): a new line, a colon, a
#: quote, an asterisk.
DRY_SEQUENCE_BREAKERS = (b"\n", b":", b'"', b"*")


def _add_penalties(chain: llama_cpp.llama_sampler_p, params: SamplingParams, model: NativeModel) -> None:
    if params.penalties:
        llama_cpp.llama_sampler_chain_add(
            chain,
            llama_cpp.llama_sampler_init_penalties(
                model.n_vocab,
                params.repeat_last_n,
                params.repeat_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            ),
        )
    if params.dry:
        breakers = (ctypes.c_char_p * len(DRY_SEQUENCE_BREAKERS))(*DRY_SEQUENCE_BREAKERS)
        llama_cpp.llama_sampler_chain_add(
            chain,
            llama_cpp.llama_sampler_init_dry(
                model.vocab,
                params.dry_multiplier,
                params.dry_base,
                params.dry_allowed_length,
                params.dry_last_n,
                breakers,
                len(DRY_SEQUENCE_BREAKERS),
            ),
        )


def _chain(
    params: SamplingParams,
    seed: int,
    grammar: llama_cpp.llama_sampler_p | None,
    model: NativeModel,
    *,
    top_k: bool = True,
) -> llama_cpp.llama_sampler_p:
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if grammar is not None:
        llama_cpp.llama_sampler_chain_add(chain, grammar)
    _add_penalties(chain, params, model)
    if params.temperature <= 0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    if top_k:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


class TokenSampler:
    """Seeded sampling, optionally constrained by a GBNF grammar.

    Constrained sampling is tiered, cheapest first:

    1. sample from the unconstrained distribution and ask the grammar about that one token;
    2. if it is rejected, ask the grammar about the `top_k` most likely tokens only and sample
       among those it allows;
    3. only if it allows none of them, filter the whole vocabulary (tens of thousands of
       candidates, the slow step) and sample again.

    Most tokens pass step 1 and nearly all the rest step 2, so constrained decoding runs close to
    free decoding speed. Every step is seeded, so the result is still a function of the seed.

    With repetition penalties or DRY on (`SamplingParams.penalised`), each chain has its own
    penalty samplers, and every chain is told the token finally chosen, and only that one: step 1
    then applies the free chain without accepting its pick, since the grammar may refuse it.
    """

    def __init__(
        self, model: NativeModel, params: SamplingParams, seed: int, grammar: str | None = None, avoid_first: int | None = None
    ) -> None:
        #: A token refused as the first one sampled (`GenerationRequest.avoid_start`).
        self._avoid_first = avoid_first
        # Each chain is a llama.cpp sampler pointer; None once freed (or when unused).
        self._free: llama_cpp.llama_sampler_p | None = _chain(params, seed, None, model)
        self._penalised = params.penalised
        self._constrained: llama_cpp.llama_sampler_p | None = None
        self._grammar: llama_cpp.llama_sampler_p | None = None
        self._tail: llama_cpp.llama_sampler_p | None = None
        self._n_vocab = model.n_vocab
        self._top_k = params.top_k if params.top_k > 0 else 40
        self.shortlist_samples = 0
        self.full_filters = 0
        if grammar is not None:
            grammar_sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode(), b"root")
            if not grammar_sampler:
                raise NativeError("llama.cpp could not parse the output grammar")
            # A second, independently seeded chain that filters by the grammar first; it owns the
            # grammar sampler, which both paths share.
            self._constrained = _chain(params, seed ^ 0x5BD1E995, grammar_sampler, model)
            self._grammar = llama_cpp.llama_sampler_chain_get(self._constrained, 0)
            self._tail = _chain(params, seed ^ 0x27D4EB2F, None, model, top_k=False)
            self._shortlist = llama_cpp.llama_token_data_array()
            self._shortlist_data = (llama_cpp.llama_token_data * self._top_k)()
            self._shortlist.data = self._shortlist_data
        if self._penalised:
            # The whole vocabulary as llama.cpp candidates, for applying the free chain without
            # accepting its pick; `_ids` restores the ids a sampler's sort moved.
            self._all_data = (llama_cpp.llama_token_data * self._n_vocab)()
            self._all = llama_cpp.llama_token_data_array()
            self._all.data = self._all_data
            self._all_view = np.ctypeslib.as_array(self._all_data)
            self._ids = np.arange(self._n_vocab, dtype=np.int32)
        self._probe = llama_cpp.llama_token_data_array()
        self._probe_data = (llama_cpp.llama_token_data * 1)()
        self._probe.data = self._probe_data
        self._probe.size = 1
        self._probe.sorted = False

    def _grammar_allows(self, token: int) -> bool:
        self._probe_data[0].id = token  # type: ignore[assignment]  # ctypes fields take ints; the stubs say c_int32
        self._probe_data[0].logit = 1.0
        self._probe_data[0].p = 0.0
        self._probe.size = 1
        self._probe.selected = -1
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(self._probe))
        return self._probe_data[0].logit != float("-inf")

    def _sample_shortlist(self, ctx: NativeContext, row: int) -> int:
        """Sample among the grammar-allowed tokens of the `top_k` most likely; -1 if none."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.handle, row), shape=(self._n_vocab,))
        top = np.argpartition(logits, -self._top_k)[-self._top_k :]
        top = top[np.argsort(-logits[top], kind="stable")]
        data = self._shortlist_data
        for i, token in enumerate(top.tolist()):
            data[i].id = token
            data[i].logit = float(logits[token])
            data[i].p = 0.0
        self._shortlist.size = len(top)
        self._shortlist.selected = -1
        self._shortlist.sorted = False
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(self._shortlist))
        kept = 0
        for i in range(len(top)):
            if data[i].logit != float("-inf"):
                data[kept].id, data[kept].logit = data[i].id, data[i].logit
                kept += 1
        if kept == 0:
            return -1
        self._shortlist.size = kept
        self._shortlist.selected = -1
        llama_cpp.llama_sampler_apply(self._tail, ctypes.byref(self._shortlist))
        return int(self._shortlist.data[self._shortlist.selected].id)

    def _pick_free(self, ctx: NativeContext, row: int) -> int:
        """The free chain's pick, accepted into no sampler (it may yet be refused)."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.handle, row), shape=(self._n_vocab,))
        view = self._all_view
        view["id"] = self._ids
        view["logit"] = logits
        view["p"] = 0.0
        self._all.size = self._n_vocab
        self._all.selected = -1
        self._all.sorted = False
        llama_cpp.llama_sampler_apply(self._free, ctypes.byref(self._all))
        return int(self._all_data[self._all.selected].id)

    def _chosen(self, token: int, *, constrained_accepted: bool = False) -> int:
        """Tell every chain the token chosen (penalty history, grammar state)."""
        if self._penalised:
            llama_cpp.llama_sampler_accept(self._free, token)
            if self._tail:
                llama_cpp.llama_sampler_accept(self._tail, token)
            if self._constrained and not constrained_accepted:
                llama_cpp.llama_sampler_accept(self._constrained, token)  # its grammar too
        elif self._grammar and not constrained_accepted:
            llama_cpp.llama_sampler_accept(self._grammar, token)
        return token

    def force(self, tokens: Iterable[int]) -> None:
        """Tell every chain about tokens the output starts with that were written for the model,
        not sampled (`GenerationRequest.output_prefix`), as if each had been chosen; NativeError
        when the grammar refuses one (checked first: llama.cpp aborts on a refused accept)."""
        for token in tokens:
            if self._grammar is not None and not self._grammar_allows(token):
                raise NativeError(f"the output grammar refuses the given start of the output at token {token}")
            self._chosen(token)

    def sample(self, ctx: NativeContext, row: int = -1) -> int:
        """A token from the logits of batch row `row` (-1: the last row of the last decode)."""
        if self._avoid_first is not None:
            # Refused in the context's own logits, which every sampling tier below reads.
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.handle, row), shape=(self._n_vocab,))
            logits[self._avoid_first] = -np.inf
            self._avoid_first = None
        if not self._penalised:
            token = llama_cpp.llama_sampler_sample(self._free, ctx.handle, row)
        else:
            token = self._pick_free(ctx, row)
        if self._grammar is None or self._grammar_allows(token):
            return self._chosen(token)
        token = self._sample_shortlist(ctx, row)
        if token >= 0:
            self.shortlist_samples += 1
            return self._chosen(token)
        self.full_filters += 1
        # `llama_sampler_sample` accepts the chosen token into every sampler of the chain.
        token = llama_cpp.llama_sampler_sample(self._constrained, ctx.handle, row)
        return self._chosen(token, constrained_accepted=True)

    def close(self) -> None:
        for chain in (self._free, self._constrained, self._tail):
            if chain:
                llama_cpp.llama_sampler_free(chain)
        self._free = self._constrained = self._grammar = self._tail = None
