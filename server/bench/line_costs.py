"""What each line cost the player in `bench quality`: the wait, the tokens decoded for it (all
attempts), the attempts, what the sampler prevented, and grants a retry made after declines."""

from __future__ import annotations

import json
import statistics
from collections import Counter

from loreguard.schemas.receipt import InteractionResult


class LineCosts:
    """Per-line costs, summed over a run."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.tokens: list[int] = []
        self.attempts: list[int] = []
        #: Attempts whose dialogue the sampler kept something out of, per gate rule.
        self.prevented: Counter[str] = Counter()
        #: Lines whose answer granted an intent that every earlier attempt had declined.
        self.grants_after_declines = 0

    def add(self, result: InteractionResult, seconds: float) -> None:
        attempts = result.receipt.attempts
        self.seconds.append(seconds)
        self.tokens.append(sum(a.tokens_generated for a in attempts))
        self.attempts.append(len(attempts))
        for attempt in attempts:
            self.prevented.update({p.rule_id for p in attempt.prevented})
        if result.intents and len(attempts) > 1 and all(_declined(a.raw_output) for a in attempts[:-1]):
            self.grants_after_declines += 1

    def figures(self, name: str) -> dict[str, object]:
        n = max(1, len(self.seconds))
        figures: dict[str, object] = {
            f"{name}_attempts_mean": round(sum(self.attempts) / n, 3),
            f"{name}_line_s_p50": round(statistics.median(self.seconds), 2) if self.seconds else 0.0,
            f"{name}_line_s_p90": round(_p90(self.seconds), 2),
            f"{name}_tokens_decoded_per_line": round(sum(self.tokens) / n, 1),
            f"{name}_grants_after_declines": self.grants_after_declines,
            f"{name}_prevented": sum(self.prevented.values()),
        }
        figures.update({f"{name}_prevented.{rule}": count for rule, count in sorted(self.prevented.items())})
        return figures


def _p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def _declined(raw: str) -> bool:
    """Whether an attempt's output parsed and granted nothing."""
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("intent", "none") == "none"
