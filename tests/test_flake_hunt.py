"""The flake hunt (`./dev test --repeat N`) finds a test that fails only sometimes."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flake_hunt import main


def test_a_test_that_fails_once_in_three_runs_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hunt's pytest runs take their root from the working directory; from the suite's own
    # folder the test ids read the same wherever the checkout lies (a clone under /tmp named
    # them by a relative path before).
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    suite = tmp_path / "test_sometimes.py"
    suite.write_text(
        "from pathlib import Path\n"
        f"RUNS = Path({str(runs)!r})\n"
        "def test_steady():\n    assert sum([1, 1]) == 2\n"
        "def test_sometimes():\n"
        "    n = int(RUNS.read_text()) + 1 if RUNS.exists() else 1\n"
        "    RUNS.write_text(str(n))\n"
        "    assert n != 2\n"
    )
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(["--repeat", "3", str(suite)])
    lines = out.getvalue().splitlines()
    assert status == 1
    assert "runs_passed: 2" in lines and "flaky: test_sometimes::test_sometimes (1 of 3 runs)" in lines, lines
    assert not any("test_steady" in line for line in lines)
