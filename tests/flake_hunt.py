"""Run the suite N times in a row, optionally with every core kept busy, and list what failed.

    ./dev test --repeat 20 --load -m "not model"      # what `./dev test` runs, 20 times, under load

A flaky test costs twice: a good change is rejected at random, and a real regression hides among
the flakes. This is the hunt that finds them: each run is a fresh pytest process writing a JUnit
report, and the summary names every test that failed at least once and how often. Exit status 0
only if every run passed.

`--load` starts one busy loop per core for the whole hunt, the way a shared CI machine is busy
with other work: a test that waits a fixed time instead of on its event fails here first.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def _spin() -> None:
    """Keep one core busy until killed, as another job on a shared CI machine would."""
    count = 0
    while True:
        count += 1


def _failures(report: Path) -> list[str]:
    """Test ids that failed or errored in one JUnit report."""
    if not report.exists():
        return ["<no report: pytest did not finish>"]
    failed = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return failed


def hunt(repeat: int, load: bool, pytest_args: list[str]) -> int:
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)] if load else []
    for spinner in spinners:
        spinner.start()
    failed: Counter[str] = Counter()
    walls: list[float] = []
    bad_runs = 0
    try:
        with tempfile.TemporaryDirectory(prefix="loreguard-hunt-") as scratch:
            for run in range(1, repeat + 1):
                report = Path(scratch) / f"run-{run}.xml"
                started = time.monotonic()
                done = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *pytest_args],
                    capture_output=True,
                    text=True,
                )
                walls.append(time.monotonic() - started)
                summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
                print(f"run {run}/{repeat}: exit {done.returncode}, {walls[-1]:.0f} s: {summary}", flush=True)
                if done.returncode != 0:
                    bad_runs += 1
                    names = _failures(report)
                    failed.update(names)
                    for name in names:
                        print(f"  failed: {name}", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
    walls.sort()
    print(f"runs: {repeat}")
    print(f"runs_passed: {repeat - bad_runs}")
    print(f"load: {'one busy loop per core' if load else 'none'}")
    print(f"wall_s_median: {walls[len(walls) // 2]:.0f}")
    print(f"wall_s_max: {walls[-1]:.0f}")
    for name, times in sorted(failed.items(), key=lambda item: (-item[1], item[0])):
        print(f"flaky: {name} ({times} of {repeat} runs)")
    return 0 if bad_runs == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--repeat", type=int, default=1, help="how many pytest runs in a row")
    parser.add_argument("--load", action="store_true", help="keep every core busy while the runs go")
    args, pytest_args = parser.parse_known_args(argv)
    if args.repeat < 1:
        parser.error("--repeat takes a count of 1 or more")
    return hunt(args.repeat, args.load, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
