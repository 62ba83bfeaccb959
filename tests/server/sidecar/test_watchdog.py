"""The stall watch: a model call that has not returned past the limit is reported once (serve
then exits with code 3 for the launcher to restart it); one that returns in time never is."""

from __future__ import annotations

import threading

import pytest
from waiting import wait_for

from loreguard.server.sidecar.watchdog import StallWatch


def test_a_call_past_the_limit_is_reported_once_with_how_long_it_took() -> None:
    readings = iter([0.0, 3.0, 9.5, 12.0, 30.0])
    reported: list[float] = []
    done = threading.Event()

    def on_stall(seconds: float) -> None:
        reported.append(seconds)
        done.set()

    watch = StallWatch(lambda: next(readings, 60.0), 10.0, on_stall, poll_s=0.001).start()
    wait_for(done.is_set, "the stall to be reported")
    watch.stop()
    assert reported == [12.0]


def test_calls_that_return_in_time_are_never_reported() -> None:
    reported: list[float] = []
    polled = threading.Event()
    count = [0]

    def reading() -> float:
        count[0] += 1
        if count[0] >= 50:
            polled.set()
        return 9.99  # just under the limit, call after call

    watch = StallWatch(reading, 10.0, reported.append, poll_s=0.001).start()
    wait_for(polled.is_set, "fifty checks")
    watch.stop()
    assert reported == []


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        StallWatch(lambda: 0.0, 0, lambda s: None)
