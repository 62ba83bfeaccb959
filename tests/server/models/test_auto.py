"""`--model auto`: the strongest measured model expected within the bar on this placement, installed
or allowed to download; else the embedded model, and one line that says which and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from loreguard.server.cli import main
from loreguard.server.models.auto import expected_first_words_s, pick_model
from loreguard.server.models.catalogue import Catalogue, FirstWords, load_catalogue


def _catalogue(big_s: float, small_s: float) -> Catalogue:
    """The catalogue's two measured Coder entries with the given seconds on 2 cores."""
    real = load_catalogue()
    big, small = real.get("qwen2.5-coder-1.5b"), real.get("qwen2.5-coder-0.5b")
    assert big is not None and small is not None
    return Catalogue(
        models=(
            small.model_copy(update={"first_words": FirstWords(cpu_s=small_s, cpu_cores=2)}),
            big.model_copy(update={"first_words": FirstWords(cpu_s=big_s, cpu_cores=2)}),
            *(m.model_copy(update={"first_words": None}) for m in real.models if m.name not in (big.name, small.name)),
        )
    )


def test_the_strongest_model_within_the_bar_is_picked() -> None:
    catalogue = _catalogue(big_s=6.0, small_s=3.0)
    both = frozenset({"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"})
    pick = pick_model(on_gpu=False, installed=both, may_download=False, cores=2, catalogue=catalogue)
    assert pick.model == "qwen2.5-coder-1.5b"
    assert "~6.0 s to its first words on 2 CPU cores once warmed, within 8 s" in pick.reason


def test_a_model_too_slow_for_this_cpu_gives_way_and_the_line_says_why() -> None:
    catalogue = _catalogue(big_s=20.0, small_s=6.0)
    both = frozenset({"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"})
    pick = pick_model(on_gpu=False, installed=both, may_download=False, cores=2, catalogue=catalogue)
    assert pick.model == "qwen2.5-coder-0.5b"
    # more cores: the same measurement scales down, and the stronger model answers in time
    assert (
        pick_model(on_gpu=False, installed=both, may_download=False, cores=8, catalogue=catalogue).model == "qwen2.5-coder-1.5b"
    )
    # a GPU: taken as at least 16 cores' worth for an entry with no GPU figure of its own
    assert pick_model(on_gpu=True, installed=both, may_download=False, cores=2, catalogue=catalogue).model == "qwen2.5-coder-1.5b"


def test_nothing_is_downloaded_without_leave_and_the_embedded_model_is_the_floor() -> None:
    catalogue = _catalogue(big_s=6.0, small_s=3.0)
    pick = pick_model(on_gpu=False, installed=frozenset(), may_download=False, cores=2, catalogue=catalogue)
    assert pick.model is None
    assert "qwen2.5-coder-1.5b is not installed (`loreguard models pull qwen2.5-coder-1.5b`, or --yes)" in pick.reason
    allowed = pick_model(on_gpu=False, installed=frozenset(), may_download=True, cores=2, catalogue=catalogue)
    assert allowed.model == "qwen2.5-coder-1.5b" and "downloading it once (1066 MiB)" in allowed.reason


def test_every_measured_model_too_slow_leaves_the_embedded_one() -> None:
    catalogue = _catalogue(big_s=60.0, small_s=30.0)
    both = frozenset({"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"})
    pick = pick_model(on_gpu=False, installed=both, may_download=True, cores=1, catalogue=catalogue)
    assert pick.model is None and "qwen2.5-coder-0.5b would take ~60 s" in pick.reason


def test_an_unmeasured_entry_is_never_picked() -> None:
    for m in load_catalogue().models:
        if m.first_words is None:
            assert expected_first_words_s(m, on_gpu=True, cores=64) is None
    measured = [m.name for m in load_catalogue().models if m.first_words is not None]
    assert set(measured) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"}


def test_demo_auto_without_a_download_says_which_model_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing installed (the private caches of conftest), no --yes, no terminal: the embedded model."""
    assert main(["demo", "--scripted", "--data", str(tmp_path)]) == 0  # --scripted loads no model at all
    code = main(["demo", "--model", "auto", "--memory-budget-mib", "1", "--data", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "model: the embedded smollm2-135m (" in err
    assert "more than the memory budget of 1 MiB" in err and "SmolLM2-135M" in err
