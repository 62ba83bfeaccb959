"""Token sampling for a whole batch at once, on the host.

Each generation has a `TokenSampler`: its settings (`SamplingParams`), its own seeded random
stream, its place in the output grammar (an `OutputMatcher`) and the tokens the repetition
penalties and DRY look back on. `sample_rows` picks the next token of every row of a step:

1. the logits of all rows as one array (on a GPU, the wait for the step ends here);
2. per row, the repetition penalties and DRY, which touch only the tokens in the row's history;
3. per row, the shortlist: the tokens within `WINDOW` nats of the row's best (one compare over
   the row), then top-k, top-p and temperature on those few; and a seeded draw from it;
4. the grammar checks each drawn token (one lexer step, microseconds). Only for the rows whose
   token it refuses does llguidance fill a token mask, all such rows at once on its own threads,
   and the row draws again among the shortlist's tokens the mask allows, in proportion; if it
   allows none of them, among the grammar's own best tokens (`full_filters`).

5. a row with a dialogue guard (`dialogue_guard`) asks it whether the token would make the
   dialogue break what the gate refuses (a forbidden phrase, a copied run of words...); if so
   the row draws again, in proportion, among the tokens left (`_guarded`).

Step 4 is exact: drawing from the shortlist and, when the token is refused, drawing again from
the allowed part gives each allowed token p(t) + P(refused) * p(t) / P(allowed) = p(t) / P(allowed),
the shortlist's distribution given the grammar. It skips the mask on most rows, and a mask is the
expensive part on a CPU: after a decode has streamed the model's weights through the caches, one
costs hundreds of microseconds, where the check costs a few.

The window is a floor like llama.cpp's min-p: a token below e^-10 of the best token's probability
is never drawn (top-p at 0.95 drops such a token anyway unless the best few hold almost nothing),
and it keeps the work per row to a few hundred candidates instead of the whole vocabulary.

Everything is a function of the logits, the seed and the history: the reproducible engine gives
the same text for the same prompt and seed, and a replay is exact.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from loreguard.server.inference.dialogue_guard import DialogueGuard, Violation
from loreguard.server.inference.llama_native import NativeContext, NativeError
from loreguard.server.inference.token_masks import MaskVocabulary, OutputMatcher, mask_words

#: Candidates lie within this many nats of a row's best token: a token whose probability is below
#: e^-10 (1/22,026) of that token's is never drawn, llama.cpp's min-p sampler at 4.5e-5.
WINDOW = 10.0
#: Which sampler wrote a text, in every receipt's model fingerprint (`extra["sampler"]`): a live
#: replay by another sampler may write other words from the same seed, and this says why
#: (2: the dialogue guard; 3: the grammar's forced tokens written in one step).
SAMPLER = "loreguard-host-3"
#: DRY's penalty grows no further past this many repeated tokens (base ** 48 is already huge).
_DRY_MAX_MATCH = 50


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


class TokenSampler:
    """One generation's sampling state: its settings, its seeded random stream, its place in the
    output grammar (None: free text) and the histories its penalties read. `sample` picks one
    row's next token; an engine with many rows calls `sample_rows` once a step instead."""

    def __init__(
        self,
        vocabulary: MaskVocabulary,
        params: SamplingParams,
        seed: int,
        grammar: str | None = None,
        avoid_first: int | None = None,
        said_before: Iterable[Iterable[int]] = (),
        guard: DialogueGuard | None = None,
        fast_forward: bool = True,
    ) -> None:
        self.vocabulary = vocabulary
        self.params = params
        self._rng = np.random.Generator(np.random.PCG64(seed & 0xFFFFFFFFFFFFFFFF))
        self.matcher: OutputMatcher | None = vocabulary.matcher(grammar) if grammar is not None else None
        #: A token refused as the first one sampled (`GenerationRequest.avoid_start`).
        self._avoid_first = avoid_first
        #: The tokens chosen so far, forced ones too: what the repetition penalties read.
        self._chosen: list[int] = []
        #: What DRY reads: the lines said before (`GenerationRequest.said_before`, each ending on a
        #: new line, a breaker, so no match runs from one into the next), then the chosen tokens.
        self._dry: list[int] = [token for line in said_before for token in line] if params.dry else []
        self._trim_dry()
        #: Rows whose candidate window held no token the grammar allows: the whole mask was read.
        self.full_filters = 0
        #: What the dialogue may not say (`dialogue_guard`); None: nothing is kept out.
        self.guard = guard
        #: Whether `forced_run` gives the grammar's forced tokens, and how many it gave.
        self.fast_forward = fast_forward
        self.forced_tokens = 0

    def force(self, tokens: Iterable[int]) -> None:
        """Tokens the output starts with that were written for the model, not sampled
        (`GenerationRequest.output_prefix`), taken as if chosen; NativeError when the grammar
        refuses one."""
        for token in tokens:
            if self.matcher is not None and not self.matcher.allows(token):
                raise NativeError(f"the output grammar refuses the given start of the output at token {token}")
            self._take(token)

    def forced_run(self, limit: int) -> list[int]:
        """The tokens the output grammar allows alone from here (JSON keys and punctuation, the
        rest of an enum value, the object's end), at most `limit`, taken as if chosen: an engine
        evaluates them with the token before in one decode instead of sampling each (llguidance's
        fast-forward, which stops short of a token the text after it could merge into, so the run
        is tokenised as the model itself would write it). Empty without a grammar, or when
        `fast_forward` is off."""
        if self.matcher is None or not self.fast_forward or limit <= 0:
            return []
        run = self.matcher.forced_tokens()[:limit]
        for token in run:
            self._take(token)
        self.forced_tokens += len(run)
        return run

    def sample(self, ctx: NativeContext, row: int = -1) -> int:
        """A token from the logits of batch row `row` (-1: the last row of the last decode)."""
        token = sample_rows(ctx, [(self, row)])[0]
        if isinstance(token, NativeError):
            raise token
        return token

    def close(self) -> None:
        self.matcher = None

    def _take(self, token: int) -> None:
        if self.matcher is not None:
            self.matcher.consume(token)
        self._chosen.append(token)
        if self.guard is not None:
            self.guard.observe(token)
        if self.params.dry:
            self._dry.append(token)
            self._trim_dry()

    def _trim_dry(self) -> None:
        window = self.params.dry_last_n
        if window > 0 and len(self._dry) > 2 * window:
            del self._dry[:-window]

    def _adjust(self, logits: np.ndarray) -> None:
        """The penalties, on one row's logits in place: a refused first token, the repetition
        penalties and DRY. Each touches only the tokens it names."""
        if self._avoid_first is not None:
            logits[self._avoid_first] = -np.inf
            self._avoid_first = None
        p = self.params
        if p.penalties and self._chosen:
            recent = self._chosen[-p.repeat_last_n :] if p.repeat_last_n > 0 else self._chosen
            counted = Counter(recent)
            tokens = np.fromiter(counted.keys(), dtype=np.int64, count=len(counted))
            counts = np.fromiter(counted.values(), dtype=np.float32, count=len(counted))
            values = logits[tokens]
            if p.repeat_penalty != 1.0:
                values = np.where(values <= 0, values * p.repeat_penalty, values / p.repeat_penalty)
            logits[tokens] = values - (counts * p.frequency_penalty + p.presence_penalty)
        if p.dry:
            for token, penalty in self._dry_penalties().items():
                logits[token] -= penalty

    def _dry_penalties(self) -> dict[int, float]:
        """DRY: a token that would extend a repeat of an earlier sequence past
        `dry_allowed_length` tokens loses `dry_multiplier * dry_base ** (length - allowed)`. A
        match runs back from the last token and stops at a sequence breaker."""
        p = self.params
        history = self._dry[-p.dry_last_n :] if p.dry_last_n > 0 else self._dry
        n = len(history)
        breakers = self.vocabulary.breaker_flags
        if n < 2 or breakers[history[-1]]:
            return {}
        last = history[-1]
        longest: dict[int, int] = {}
        i = -1
        while True:
            try:
                i = history.index(last, i + 1, n - 1)  # each earlier place the last token was said
            except ValueError:
                break
            length = 1
            while length <= i and length < _DRY_MAX_MATCH:
                earlier = history[i - length]
                if earlier != history[n - 1 - length] or breakers[earlier]:
                    break
                length += 1
            following = history[i + 1]
            if length > longest.get(following, 0):
                longest[following] = length
        return {
            token: p.dry_multiplier * p.dry_base ** (length - p.dry_allowed_length)
            for token, length in longest.items()
            if length >= p.dry_allowed_length
        }

    def _shortlist(self, ids: np.ndarray, values: np.ndarray) -> Shortlist:
        """Top-k, top-p and temperature over candidates (token ids and their logits): the tokens
        the draw may pick, best first, with their weights."""
        p = self.params
        if p.temperature <= 0:  # greedy; ties to the lowest id
            return Shortlist(ids[values == values.max()].min(keepdims=True), np.ones(1))
        if 0 < p.top_k < len(ids):
            kept = np.argpartition(-values, p.top_k - 1)[: p.top_k]
            ids, values = ids[kept], values[kept]
        order = np.lexsort((ids, -values))  # best first; ties to the lowest id
        ids, logits = ids[order], values[order].astype(np.float64)
        if p.top_p < 1.0:
            mass = np.cumsum(np.exp(logits - logits[0]))
            keep = int(np.searchsorted(mass, p.top_p * mass[-1])) + 1
            ids, logits = ids[:keep], logits[:keep]
        return Shortlist(ids, np.exp((logits - logits[0]) / p.temperature))

    def _draw(self, shortlist: Shortlist) -> int:
        """One seeded draw from the shortlist, in proportion to the weights."""
        if len(shortlist.ids) == 1:
            return int(shortlist.ids[0])
        cumulative = np.cumsum(shortlist.weights)
        drawn = int(np.searchsorted(cumulative, self._rng.random() * cumulative[-1], side="right"))
        return int(shortlist.ids[min(drawn, len(shortlist.ids) - 1)])


@dataclass(frozen=True)
class Shortlist:
    """What a row's draw picks from: token ids, best first, and their (unnormalised) weights."""

    ids: np.ndarray
    weights: np.ndarray

    def without(self, tokens: set[int]) -> Shortlist | None:
        """The shortlist less `tokens`; None when nothing is left."""
        kept = ~np.isin(self.ids, np.fromiter(tokens, dtype=np.int64))
        return Shortlist(self.ids[kept], self.weights[kept]) if kept.any() else None

    def within(self, mask: np.ndarray) -> Shortlist | None:
        """The tokens `mask` allows, with their weights; None when it allows none of them."""
        kept = ((mask[self.ids >> 5] >> (self.ids & 31)) & 1).astype(bool)
        return Shortlist(self.ids[kept], self.weights[kept]) if kept.any() else None


@dataclass
class SamplingTimes:
    """Where `sample_rows` spent its time, summed over calls (`bench sampling`)."""

    #: Reading the logits: on a GPU, waiting for the step to finish (device time, not host work).
    logits_s: float = 0.0
    #: Penalties, shortlists, draws and the grammar's check of each drawn token (host work).
    choose_s: float = 0.0
    #: Filling the masks of the rows whose drawn token the grammar refused (host work).
    masks_s: float = 0.0
    rows: int = 0
    #: Rows whose drawn token the grammar refused: the rows that needed a mask.
    masked_rows: int = 0

    @property
    def host_s(self) -> float:
        return self.masks_s + self.choose_s


def sample_rows(
    ctx: NativeContext, rows: Sequence[tuple[TokenSampler, int]], times: SamplingTimes | None = None
) -> list[int | NativeError]:
    """The next token of each (sampler, batch row) of the last decode, in order; each sampler
    takes its token (grammar, histories). A row whose grammar failed or allows nothing gets the
    NativeError instead, and the other rows their tokens. See the module's docstring."""
    started = time.perf_counter()
    logits = ctx.logits_rows([row for _, row in rows])
    read = time.perf_counter()
    samplers = [sampler for sampler, _ in rows]
    for sampler, row_logits in zip(samplers, logits, strict=True):
        sampler._adjust(row_logits)
    best = logits.max(axis=1)
    shortlists: list[Shortlist] = []
    drawn: list[int | NativeError] = []
    for r, sampler in enumerate(samplers):
        ids = np.flatnonzero(logits[r] >= best[r] - WINDOW)
        shortlists.append(sampler._shortlist(ids, logits[r][ids]))
        drawn.append(sampler._draw(shortlists[-1]))
    refused = [r for r, s in enumerate(samplers) if s.matcher is not None and not s.matcher.allows(drawn[r])]  # type: ignore[arg-type]
    chosen = time.perf_counter()
    if refused:
        vocabulary = samplers[0].vocabulary
        masks = np.zeros((len(refused), mask_words(vocabulary.n_vocab)), dtype=np.int32)
        vocabulary.fill([samplers[r].matcher for r in refused], masks)
        for mask, r in zip(masks, refused, strict=True):
            drawn[r] = _constrained(samplers[r], shortlists[r], mask, logits[r])
    masked = time.perf_counter()
    row_masks = dict(zip(refused, masks, strict=True)) if refused else {}
    for r, sampler in enumerate(samplers):
        token = drawn[r]
        if sampler.guard is not None and isinstance(token, int) and (why := sampler.guard.refuses(token)) is not None:
            drawn[r] = _guarded(sampler, shortlists[r], token, why, logits[r], row_masks.get(r))
    for sampler, token in zip(samplers, drawn, strict=True):
        if isinstance(token, int):
            sampler._take(token)
    if times is not None:
        times.logits_s += read - started
        times.choose_s += chosen - read + time.perf_counter() - masked
        times.masks_s += masked - chosen
        times.rows += len(rows)
        times.masked_rows += len(refused)
    return drawn


def _constrained(sampler: TokenSampler, shortlist: Shortlist, mask: np.ndarray, logits: np.ndarray) -> int | NativeError:
    """A row whose draw the grammar refused: the shortlist's tokens the mask allows, drawn again in
    proportion (exactly the shortlist's distribution given the grammar); if it allows none of them,
    the grammar's own best tokens (`full_filters`), shortlisted the same way."""
    try:
        sampler.matcher.check()  # type: ignore[union-attr]
        allowed = shortlist.within(mask)
        if allowed is None:
            sampler.full_filters += 1
            bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: len(logits)].astype(bool)
            ids = np.flatnonzero(bits & (logits > -np.inf))
            if not len(ids):
                raise NativeError("the output grammar allows no next token")
            ids = ids[logits[ids] >= logits[ids].max() - WINDOW]
            allowed = sampler._shortlist(ids, logits[ids])
        return sampler._draw(allowed)
    except NativeError as exc:
        return exc


#: Tokens one row may have refused by its guard in one step before the first is let through.
MAX_GUARD_REFUSALS = 32


def _guarded(
    sampler: TokenSampler, shortlist: Shortlist, token: int, why: Violation | None, logits: np.ndarray, mask: np.ndarray | None
) -> int:
    """A row whose drawn token its guard refused: drawn again, in proportion, among the tokens
    left that the grammar and the guard allow: first the shortlist's, then any token within the
    window of the best. When none is left (or `MAX_GUARD_REFUSALS` were refused) the first token
    is let through: the gate judges the reply."""
    guard = sampler.guard
    assert guard is not None
    first, refused = token, {token}
    pool: Shortlist | None = shortlist.within(mask) if mask is not None else shortlist
    widened = False
    for _ in range(MAX_GUARD_REFUSALS):
        if why is not None:
            guard.count(why)
        refused.add(token)
        pool = pool.without(refused) if pool is not None else None
        if pool is None and not widened:
            widened = True
            ids = np.flatnonzero(logits >= logits.max() - WINDOW)
            ids = ids[~np.isin(ids, np.fromiter(refused, dtype=np.int64))]
            pool = sampler._shortlist(ids, logits[ids]) if len(ids) else None
        if pool is None:
            break
        token = sampler._draw(pool)
        if sampler.matcher is not None and not sampler.matcher.allows(token):
            why = None  # the grammar's refusal, not the guard's: not counted
            continue
        why = guard.refuses(token)
        if why is None:
            return token
    guard.refuses(first)  # the guard's probe follows the token taken
    return first
