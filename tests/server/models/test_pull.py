"""`loreguard models pull` against the fake Hub: download, progress, resume, verification,
gated repos and offline mode."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fake_hub import COMMIT, FILE, REFERENCE, REPO, FakeHub, cache_leftovers
from waiting import wait_for

from loreguard.server.cli import main
from loreguard.server.models.pull import (
    ChecksumMismatch,
    GatedModel,
    HubFile,
    ModelError,
    NotCached,
    installed_files,
    pull,
    remove_abandoned_partials,
)


def _snapshot(home: Path) -> Path:
    return home / "hub" / "models--fake--smol-GGUF" / "snapshots" / COMMIT / FILE


def test_pull_downloads_into_the_hf_home_cache_and_prints_the_path(
    hub: FakeHub, tmp_path: Path, model_bytes: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "pull", REFERENCE]) == 0
    out, err = capsys.readouterr()
    path = Path(out.strip())
    assert path == _snapshot(tmp_path / "hf")
    assert path.read_bytes() == model_bytes
    assert [r[0] for r in hub.requests] == ["HEAD", "GET"]
    # Progress: a line per 10% when stderr is not a terminal, ending at 100%, then the check.
    lines = [line for line in err.splitlines() if line.startswith(f"downloading {FILE}: ")]
    assert len(lines) >= 5 and lines[-1].startswith(f"downloading {FILE}: 100% (")
    assert f"verifying sha256 of {FILE}" in err


def test_a_second_pull_uses_the_cache_without_downloading(hub: FakeHub) -> None:
    first = pull(HubFile(REPO, FILE), progress=io.StringIO())
    second = pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert first == second
    assert [r[0] for r in hub.requests] == ["HEAD", "GET", "HEAD"]


def test_a_cut_connection_resumes_where_it_stopped(hub: FakeHub, tmp_path: Path, model_bytes: bytes) -> None:
    hub.cut_after = len(model_bytes) // 2
    path = pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(model_bytes).hexdigest()
    first, second = hub.gets()
    assert first[2] is None
    assert second[2] is not None and second[2].startswith("bytes=")
    resumed_at = int(second[2][6:].rstrip("-"))
    assert 0 < resumed_at <= hub.cut_after  # it asked for the rest, not the whole file again


def test_corrupt_bytes_under_the_hubs_checksum_are_removed(hub: FakeHub, tmp_path: Path, model_bytes: bytes) -> None:
    corrupt = bytearray(model_bytes)
    corrupt[len(corrupt) // 3] ^= 0xFF
    hub.add(REPO, FILE, model_bytes, served=bytes(corrupt))
    with pytest.raises(ChecksumMismatch, match="corrupt and has been removed"):
        pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert not _snapshot(tmp_path / "hf").exists()
    assert not _snapshot(tmp_path / "hf").is_symlink()
    assert cache_leftovers(tmp_path / "hf") == []  # no blob, no .incomplete file


def test_a_pinned_checksum_that_differs_rejects_the_file(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(ChecksumMismatch, match="expected 0000000000000000"):
        pull(HubFile(REPO, FILE), sha256="0" * 64, progress=io.StringIO())
    assert cache_leftovers(tmp_path / "hf") == []


def test_a_pinned_size_that_differs_rejects_the_file(hub: FakeHub, tmp_path: Path, model_bytes: bytes) -> None:
    with pytest.raises(ChecksumMismatch, match=f"is {len(model_bytes)} bytes, expected 12"):
        pull(HubFile(REPO, FILE), size_bytes=12, progress=io.StringIO())
    assert cache_leftovers(tmp_path / "hf") == []


def test_a_gated_repo_says_to_accept_the_licence_and_set_a_token(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.gated.add(REPO)
    monkeypatch.setenv("HF_TOKEN", "hf_not_yet_allowed")
    with pytest.raises(GatedModel, match="accept its licence") as caught:
        pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert "HF_TOKEN" in str(caught.value)
    assert hub.requests[0][3] == "Bearer hf_not_yet_allowed"  # the token from HF_TOKEN was sent
    assert main(["models", "pull", REFERENCE]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"loreguard: {REPO} is gated")


def test_offline_mode_uses_the_cached_file_without_a_request(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    online = pull(HubFile(REPO, FILE), progress=io.StringIO())
    seen = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert pull(HubFile(REPO, FILE), progress=io.StringIO()) == online
    assert len(hub.requests) == seen


def test_offline_mode_without_the_file_cached_says_so(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(NotCached, match="not in the cache .* HF_HUB_OFFLINE is set"):
        pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert hub.requests == []


def test_a_missing_file_and_a_bad_reference_are_one_line_each(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelError, match="has no file 'other.gguf'"):
        pull(HubFile(REPO, "other.gguf"), progress=io.StringIO())
    assert main(["models", "pull", "hf:just-a-name"]) == 2
    assert "write hf:OWNER/REPO/FILE.gguf" in capsys.readouterr().err
    assert main(["models", "pull", "lama-3.2-3b"]) == 2
    assert "closest: llama-3.2-3b" in capsys.readouterr().err


def test_installed_lists_pulled_files_with_their_path(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    path = pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert main(["models", "list", "--installed"]) == 0
    out = capsys.readouterr().out
    assert REFERENCE in out and str(path) in out


def _pull_process(*args: str) -> subprocess.Popen[str]:
    """`loreguard models pull` (or another command) in its own process, with this test's Hub
    environment (the fixtures set it in os.environ)."""
    command = [sys.executable, "-m", "loreguard.server.cli", *args]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _partials(home: Path) -> list[Path]:
    return sorted(home.rglob("*.incomplete"))


@contextmanager
def _pull_stalled_half_way(hub: FakeHub, home: Path, model_bytes: bytes) -> Iterator[None]:
    """A `models pull` subprocess whose transfer the hub stalls half way, with part of it on
    disk; killed on exit."""
    hub.stall_after = len(model_bytes) // 2
    process = _pull_process("models", "pull", REFERENCE)
    try:
        assert hub.stalled.wait(60), "the pull never started its transfer"
        # httpx hands huggingface_hub 10 MiB chunks; wait until one is on disk.
        wait_for(lambda: any(p.stat().st_size > 0 for p in _partials(home)), "a partial file on disk")
        yield
    finally:
        process.kill()
        process.communicate(timeout=60)


def test_a_pull_killed_mid_transfer_leaves_nothing_loadable_and_the_next_pull_cleans_up(
    hub: FakeHub, tmp_path: Path, model_bytes: bytes
) -> None:
    """huggingface_hub 1.x keeps a partial download in a process-unique file and never reuses it
    in another process, so a pull killed half way starts the file again (docs/models.md). What
    Loreguard guarantees: nothing under the final name, and the abandoned partial is removed."""
    home = tmp_path / "hf"
    with _pull_stalled_half_way(hub, home, model_bytes):
        (partial,) = _partials(home)
    # killed
    assert not _snapshot(home).exists()
    assert installed_files() == []  # nothing a `--model` could load
    assert _partials(home) == [partial] and 0 < partial.stat().st_size < len(model_bytes)
    hub.release.set()

    path = pull(HubFile(REPO, FILE), progress=io.StringIO())
    assert path.read_bytes() == model_bytes
    first, second = hub.gets()
    # Not resumed from the killed process's partial: if huggingface_hub starts to, this fails;
    # then update docs/models.md (and keep the partial).
    assert second[2] is None
    assert _partials(home) == []  # the abandoned partial is gone, not gigabytes lost for good


def test_a_partial_another_process_is_writing_is_left_alone(hub: FakeHub, tmp_path: Path, model_bytes: bytes) -> None:
    """The clean-up takes huggingface_hub's own lock on the blob first: a download in flight
    elsewhere (here: a pull stalled mid-transfer) keeps its file."""
    home = tmp_path / "hf"
    with _pull_stalled_half_way(hub, home, model_bytes):
        (partial,) = _partials(home)
        remove_abandoned_partials(HubFile(REPO, FILE))
        assert partial.exists()
