"""Time for a second try: a first attempt bounded so that a repair still fits the time left.

On a slow machine one generation can take the whole of an interaction's time (the 1.5B on two
CPU cores: 5-30 s a line), and a first attempt the gate refuses is then the last: the player
hears a fallback. The pipeline measures its backend's decode speed on the generations it runs
(`DecodeSpeed`); before a first attempt, when the time left (the retry budget or the deadline,
whichever ends first) at that speed would not cover two whole replies, the attempt's dialogue is
bounded (`first_attempt_chars`), in the output grammar itself, so the line is shorter rather than
cut off, and half the time is left for a repair. The bound is recorded on the attempt
(`AttemptRecord.dialogue_chars`), and a replay takes it from there.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque

from loreguard.server.inference.base import Generation

#: Generations the speed is the median of.
SPEED_WINDOW = 8
#: Tokens a generation must have decoded to be timed (a few tokens say little of a speed).
MIN_TIMED_TOKENS = 8
#: Tokens of an output that are not its dialogue: the JSON's keys, the emotion, the intent.
OUTPUT_OVERHEAD_TOKENS = 30
#: Dialogue characters per token, for English on the catalogue's tokenizers (a few short words).
CHARS_PER_TOKEN = 4
#: The shortest bound: a line a player can still take for an answer.
MIN_DIALOGUE_CHARS = 48


class DecodeSpeed:
    """The backend's decode speed, tokens per second, the median over its last generations.
    Shared by the interactions of one pipeline, which may run on several threads."""

    def __init__(self) -> None:
        self._rates: deque[float] = deque(maxlen=SPEED_WINDOW)
        self._lock = threading.Lock()

    def observe(self, generation: Generation) -> None:
        decode_ms = generation.total_ms - generation.ttft_ms
        if generation.tokens_generated >= MIN_TIMED_TOKENS and decode_ms > 0:
            with self._lock:
                self._rates.append(generation.tokens_generated * 1000.0 / decode_ms)

    def tokens_per_s(self) -> float | None:
        """None until a generation was timed."""
        with self._lock:
            return statistics.median(self._rates) if self._rates else None


def first_attempt_chars(left_ms: float, tokens_per_s: float | None, limit: int) -> int:
    """The dialogue's length bound for a first attempt with `left_ms` left: `limit`, or fewer
    characters when two replies that long would not be decoded in the time left."""
    if tokens_per_s is None or math.isinf(left_ms):
        return limit
    tokens = left_ms / 2 / 1000 * tokens_per_s - OUTPUT_OVERHEAD_TOKENS
    return max(MIN_DIALOGUE_CHARS, min(limit, int(tokens * CHARS_PER_TOKEN)))
