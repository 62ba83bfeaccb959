"""Designer feedback on behavioural rules: each rule's counts, in RAM and in the `behaviour` table."""

from __future__ import annotations

from loreguard.memory.database import MemoryFile
from loreguard.schemas.rules import BehaviourStats


class BehaviourFeedback:
    """The behaviour statistics of an open memory file (`store.behaviour`). The counts are
    bookkeeping, outside the memory hash; a save slot holds them."""

    def __init__(self, file: MemoryFile) -> None:
        self._file = file
        self._stats: dict[str, BehaviourStats] = {}

    def reset(self, stats: dict[str, BehaviourStats]) -> None:
        """Take the counts as read from the file (on open, slot load, replay)."""
        self._stats = stats

    def stats(self, rule_id: str) -> BehaviourStats:
        return self._stats.get(rule_id) or BehaviourStats(rule_id=rule_id)

    def all_stats(self) -> dict[str, BehaviourStats]:
        return dict(self._stats)

    def record_correction(self, rule_id: str, verdict: int) -> BehaviourStats:
        """Designer feedback on a behavioural rule: +1 (it was right) or -1 (it was wrong)."""
        if verdict not in (1, -1):
            raise ValueError("verdict must be +1 or -1")
        with self._file.lock:
            old = self.stats(rule_id)
            new = old.model_copy(update={"positive": old.positive + (verdict > 0), "negative": old.negative + (verdict < 0)})
            with self._file.transaction() as db:
                db.execute(
                    "INSERT INTO behaviour(rule_id, positive, negative) VALUES (?, ?, ?) "
                    "ON CONFLICT(rule_id) DO UPDATE SET positive=excluded.positive, negative=excluded.negative",
                    (rule_id, new.positive, new.negative),
                )
            self._stats[rule_id] = new
            return new
