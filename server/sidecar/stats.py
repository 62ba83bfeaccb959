"""Counters and latency percentiles for `stats` replies; safe to update from any thread."""

from __future__ import annotations

import statistics
import threading
from collections import Counter, deque

_WINDOW = 4096


def percentile(values: list[float] | list[int], q: float) -> float:
    """The value at quantile `q` (0 < q < 1), interpolated between ranks (`statistics.quantiles`,
    inclusive method); benchmarks and `stats` share it."""
    if len(values) == 1:
        return float(values[0])
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    return cuts[min(len(cuts) - 1, max(0, round(q * 1000) - 1))]


class SidecarStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._latency: dict[str, deque[int]] = {}

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] += n

    def observe(self, name: str, micros: int) -> None:
        """Record one latency; percentiles cover the most recent 4,096 of each name."""
        with self._lock:
            self._latency.setdefault(name, deque(maxlen=_WINDOW)).append(int(micros))

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counters.items()))

    def latency_us(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._lock:
            windows = {name: list(values) for name, values in self._latency.items() if values}
        for name in sorted(windows):
            values = windows[name]
            out[f"{name}_p50"] = int(percentile(values, 0.5))
            out[f"{name}_p99"] = int(percentile(values, 0.99))
            out[f"{name}_count"] = len(values)
        return out
