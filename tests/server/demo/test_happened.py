"""The terminal demo's turn headings say what happened on the run, read from each receipt."""

from __future__ import annotations

import io
import re
from pathlib import Path

from loreguard.server.demo.run import run_demo


def test_each_heading_says_what_the_receipt_says(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_demo(tmp_path / "data", out=out) == 0
    headings = re.findall(r"^\d\. \[(.*)\]$", out.getvalue(), flags=re.MULTILINE)
    assert headings == [
        "passed first time; 2 memory change(s) applied",
        "1 attempt refused (constraints), then one passed",
        "1 attempt refused (knowledge): the authored fallback was said",
        "passed first time; approved give_item; the rules sold; 2 memory change(s) applied",
        "1 attempt refused (canonical), then one passed",
        "passed first time; an override of a canonical fact refused",
    ]
    assert out.getvalue().count("(written to show: ") == 6
