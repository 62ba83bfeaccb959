"""The autoload's model download (settings.gd `allow_model_download`, supervisor.gd's progress
lines, launcher.gd's `downloading_model` status) in a real headless Godot running the demo scene,
with a real `loreguard serve` pulling the embedded GGUF from the fake Hub (tests/fake_hub.py)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_hub import FILE, REFERENCE, REPO, FakeHub, cache_leftovers, fake_hub, hub_environment
from godot_helpers import DEMO_PROJECT, run_godot
from sidecar_helpers import free_port

from loreguard.server.inference.model_files import embedded_model_path

pytestmark = pytest.mark.slow

_STATUS = re.compile(r"^download: status (\w+) (-?[0-9.]+) \| (.*)$")


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with fake_hub() as h:
        h.add(REPO, FILE, embedded_model_path().read_bytes())
        yield h


def _run_demo(hub: FakeHub, tmp_path: Path, *, allow_download: bool) -> tuple[str, list[tuple[str, float, str]]]:
    """The demo until its sidecar is ready or failed: its output and the statuses it printed
    (state, download fraction or -1, the status label's text)."""
    port = free_port()
    loreguard = Path(sys.executable).with_name("loreguard")
    env = {
        "LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{port}", "LOREGUARD_AUTO_LAUNCH": "1",
        "LOREGUARD_LAUNCH_COMMAND": f"{loreguard} serve --port {port} --data {tmp_path / 'data'}",
        "LOREGUARD_MODEL": REFERENCE, "LOREGUARD_ALLOW_MODEL_DOWNLOAD": "1" if allow_download else "0",
        **hub_environment(hub, str(tmp_path / "hf")),
    }  # fmt: skip
    env.pop("HF_TOKEN", None)
    result = run_godot(["res://tests/download.tscn"], project=DEMO_PROJECT, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    statuses = [(m.group(1), float(m.group(2)), m.group(3)) for line in output.splitlines() if (m := _STATUS.match(line))]
    return output, statuses


@pytest.mark.model
def test_allowed_download_shows_progress_then_loads_and_is_ready(hub: FakeHub, tmp_path: Path) -> None:
    output, statuses = _run_demo(hub, tmp_path, allow_download=True)
    assert "download: ended ready" in output, output
    states = [s[0] for s in statuses]
    first, last = states.index("downloading_model"), len(states) - 1 - states[::-1].index("downloading_model")
    assert set(states[first : last + 1]) == {"downloading_model"}, states  # one unbroken download
    assert "loading_model" in states[last:] and states[-1] == "ready", states
    fractions = [s[1] for s in statuses[first : last + 1]]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0, fractions
    # A status per percent the transfer moved: huggingface_hub reports every 10 MiB chunk, about 10% of this file.
    assert len(set(fractions)) >= 5, fractions
    # The demo's status label said it in the player's words.
    labels = [s[2] for s in statuses[first:last]]
    assert any(re.fullmatch(r"Fetching the townsfolk's minds: \d+% of \d+ MiB\.\.\.", label) for label in labels), labels
    assert [r[0] for r in hub.requests] == ["HEAD", "GET"]
    blobs = [p for p in cache_leftovers(tmp_path / "hf") if "/blobs/" in p]
    assert len(blobs) == 1 and not blobs[0].endswith(".incomplete"), blobs


def test_without_the_setting_a_missing_model_fails_with_what_to_do_and_downloads_nothing(hub: FakeHub, tmp_path: Path) -> None:
    output, statuses = _run_demo(hub, tmp_path, allow_download=False)
    want = (
        f"the dialogue model {REFERENCE} is not installed: run `loreguard models pull {REFERENCE}`, or turn on the"
        " project setting loreguard/sidecar/allow_model_download to download it when the game starts"
    )
    assert f"download: ended failed: {want}" in output, output
    assert f"download: problem: {want}" in output, output
    states = [s[0] for s in statuses]
    assert "restarting" not in states and "downloading_model" not in states, states  # a restart cannot fix it
    assert hub.requests == []
    assert cache_leftovers(tmp_path / "hf") == []
