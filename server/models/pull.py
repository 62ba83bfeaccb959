"""Download a model file from the Hugging Face Hub, verified, into the Hub's own cache.

`huggingface_hub` does the transfer: it caches under `HF_HOME` (or `HF_HUB_CACHE`), talks to
`HF_ENDPOINT`, sends `HF_TOKEN`, and resumes a cut connection with a ranged request. Loreguard
adds what a game needs on top: a plain progress line, a size and sha256 check against the
catalogue's pinned values or the Hub's published ones (an LFS file's ETag is its sha256), and
the removal of a file that fails them, so a corrupt or partial download is never loaded.

The environment is read at call time, not when `huggingface_hub` was imported, so a caller (or a
test) that sets `HF_ENDPOINT` or `HF_HUB_OFFLINE` later is still honoured.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from loreguard.server.inference.model_files import file_sha256

#: A sha256 in hex: what the Hub's ETag of an LFS file is.
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TRUE = {"1", "on", "yes", "true"}


class ModelError(Exception):
    """A model that cannot be fetched or used: printed as one line, exit status 2."""


class GatedModel(ModelError):
    """The repository asks for its licence to be accepted and a token (401/403)."""


class ChecksumMismatch(ModelError):
    """The downloaded file's size or sha256 is not the published one; it was removed."""


class NotCached(ModelError):
    """Offline mode, and the file is not in the local cache."""


class HubUnreachable(ModelError):
    """The Hub (or the mirror `HF_ENDPOINT` names) did not answer, or failed on its side (5xx),
    and the file is not cached: a catalogue entry with a registry source falls back to it."""


@dataclass(frozen=True)
class HubFile:
    repo: str
    file: str
    revision: str = "main"

    @property
    def reference(self) -> str:
        return f"hf:{self.repo}/{self.file}"


def parse_hub_reference(text: str) -> HubFile:
    """`hf:OWNER/REPO/PATH/IN/REPO.gguf` (optionally `@REVISION` after the file)."""
    body = text[3:] if text.startswith("hf:") else text
    revision = "main"
    if "@" in body:
        body, revision = body.rsplit("@", 1)
    parts = body.split("/")
    if len(parts) < 3 or not all(parts) or not revision:
        raise ModelError(f"{text!r} is not a Hub file: write hf:OWNER/REPO/FILE.gguf")
    return HubFile(repo="/".join(parts[:2]), file="/".join(parts[2:]), revision=revision)


def hub_cache_dir() -> Path:
    """Where `huggingface_hub` keeps downloads: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _verified_marker(blob: Path) -> Path:
    """Beside the Hub cache, not inside it: the cache's own scanner owns that layout."""
    return hub_cache_dir().parent / "loreguard-verified" / blob.name


class NoHubClient(ModelError):
    """`huggingface_hub` is not importable: a frozen bundle leaves it out (server/shipping/build_bundle.py)."""


def require_hub(what: str | None = None) -> None:
    """One line instead of an ImportError where `huggingface_hub` is missing (a frozen bundle);
    `what` is the model asked for, if any."""
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        if what is None:
            raise NoHubClient(
                "this sidecar has no Hugging Face Hub client (a bundle leaves it out): use the pip-installed CLI"
            ) from None
        raise NoHubClient(
            f"this sidecar has no Hugging Face Hub client (a bundle leaves it out), so it cannot use {what}: "
            f"download it with the pip-installed CLI (`loreguard models pull {what}`) and pass the file's path with --model"
        ) from None


def cached_file(hub_file: HubFile) -> Path | None:
    """The file if it is in the cache (no network)."""
    require_hub(hub_file.reference)
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(hub_file.repo, hub_file.file, cache_dir=hub_cache_dir(), revision=hub_file.revision)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


class _LineProgress:
    """A progress display `huggingface_hub` drives like a tqdm bar (`update`, context manager).

    In a terminal it redraws one line; otherwise (a log, or the Godot addon tailing the sidecar's
    log file) it prints a line at every `step_pct` percent, `downloading FILE: 40% (426.1/1065.6 MiB)`:
    the line the addon's supervisor turns into its `downloading_model` status.
    """

    stream: TextIO

    label: str = ""
    #: A line per this many percent when the stream is not a terminal.
    step_pct: int = 10

    def __init__(self, *, total: int | None = None, initial: int = 0, desc: str = "", **_: Any) -> None:
        self.total = total
        self.n = initial
        self.desc = self.label or desc
        self._tty = self.stream.isatty()
        self._shown = -1

    def _line(self) -> str:
        done = self.n / 2**20
        if not self.total:
            return f"downloading {self.desc}: {done:.1f} MiB"
        pct = min(100, self.n * 100 // self.total)
        return f"downloading {self.desc}: {pct}% ({done:.1f}/{self.total / 2**20:.1f} MiB)"

    def update(self, n: int = 1) -> None:
        self.n += n
        step = (self.n * 100 // self.total) if self.total else self.n >> 24
        if self._tty:
            if step != self._shown:
                self._shown = step
                self.stream.write("\r" + self._line())
                self.stream.flush()
        elif step // self.step_pct != self._shown // self.step_pct or self._shown < 0:
            self._shown = step
            self.stream.write(self._line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> _LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _progress_class(stream: TextIO, label: str, step_pct: int) -> type[_LineProgress]:
    return type("LineProgress", (_LineProgress,), {"stream": stream, "label": label, "step_pct": step_pct})


def verify(path: Path, hub_file: HubFile, *, size_bytes: int | None = None, sha256: str | None = None,
           log: TextIO | None = None) -> None:  # fmt: skip
    """Check a cached file against the pinned size/sha256, or the Hub's (the blob's name is its
    ETag); a file that fails is removed from the cache and ModelChoice refuses it."""
    blob = path.resolve()
    expected_sha = sha256 or (blob.name if _SHA256.match(blob.name) else None)
    size = blob.stat().st_size
    marker = _verified_marker(blob)
    if marker.is_file() and marker.read_text().strip() == f"{size} {expected_sha}":
        return  # hashed once already: a multi-GB file is not hashed on every start
    problem = None
    if size_bytes is not None and size != size_bytes:
        problem = f"is {size} bytes, expected {size_bytes}"
    elif expected_sha is not None:
        if log is not None:
            print(f"verifying sha256 of {hub_file.file} ...", file=log, flush=True)
        actual = file_sha256(blob)
        if actual != expected_sha:
            problem = f"has sha256 {actual[:16]}…, expected {expected_sha[:16]}…"
    if problem is not None:
        path.unlink(missing_ok=True)  # the snapshot link first: nothing is left under the file's name
        blob.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{hub_file.reference} {problem}: the download was corrupt and has been removed; pull it again")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{size} {expected_sha}\n")


def remove_abandoned_partials(hub_file: HubFile) -> None:
    """Delete the partial downloads that killed processes left in this repo's cache folder.

    huggingface_hub 1.x downloads into a process-unique `<etag>.<id>.incomplete` and deletes it
    when a download fails; a process killed mid-transfer (a game closed during the download)
    leaves it behind, and no later download reuses it (each starts the file again). So each
    would be gigabytes lost for good. One is deleted only while holding the lock huggingface_hub
    holds while it downloads that blob: a download in flight in another process keeps its file.
    """
    from filelock import FileLock, Timeout
    from huggingface_hub.file_download import repo_folder_name

    folder = repo_folder_name(repo_id=hub_file.repo, repo_type="model")
    blobs = hub_cache_dir() / folder / "blobs"
    if not blobs.is_dir():
        return
    for partial in sorted(blobs.glob("*.incomplete")):
        locks = hub_cache_dir() / ".locks" / folder
        locks.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(locks / f"{partial.name.split('.', 1)[0]}.lock"), timeout=0):
                partial.unlink(missing_ok=True)
        except Timeout:
            continue  # another process is downloading that blob now


def pull(hub_file: HubFile, *, size_bytes: int | None = None, sha256: str | None = None,
         progress: TextIO | None = None, progress_step_pct: int = 10) -> Path:  # fmt: skip
    """Download (or find in the cache) and verify one file; its path in the Hub cache. Progress
    goes to `progress` (a line per `progress_step_pct` percent when it is not a terminal)."""
    require_hub(hub_file.reference)
    import httpx
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = hub_endpoint()
    if not offline():
        remove_abandoned_partials(hub_file)
    try:
        local = hf_hub_download(
            hub_file.repo,
            hub_file.file,
            revision=hub_file.revision,
            cache_dir=hub_cache_dir(),
            endpoint=endpoint,
            token=os.environ.get("HF_TOKEN") or None,
            local_files_only=offline(),
            tqdm_class=_progress_class(progress, hub_file.file, progress_step_pct) if progress is not None else None,
        )
    except GatedRepoError:
        raise GatedModel(
            f"{hub_file.repo} is gated: accept its licence at {endpoint}/{hub_file.repo} while logged in, "
            "then set HF_TOKEN to a token of that account (or run `hf auth login`)"
        ) from None
    except RevisionNotFoundError:
        raise ModelError(f"{hub_file.repo} has no revision {hub_file.revision!r}") from None
    except RepositoryNotFoundError:
        raise ModelError(
            f"{hub_file.repo} was not found on {endpoint}, or it is private or gated: check the name, "
            "or set HF_TOKEN to a token that may read it"
        ) from None
    except LocalEntryNotFoundError:
        if offline():
            raise NotCached(
                f"{hub_file.reference} is not in the cache at {hub_cache_dir()} and HF_HUB_OFFLINE is set: "
                "pull it while online, or unset HF_HUB_OFFLINE"
            ) from None
        raise HubUnreachable(f"could not reach {endpoint} to download {hub_file.reference}, and it is not cached") from None
    except EntryNotFoundError:
        raise ModelError(f"{hub_file.repo} has no file {hub_file.file!r}") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise GatedModel(
                f"{endpoint} refused {hub_file.reference} ({status}): if the repo is gated, accept its licence at "
                f"{endpoint}/{hub_file.repo} and set HF_TOKEN (or run `hf auth login`)"
            ) from None
        failed = HubUnreachable if status is not None and status >= 500 else ModelError
        raise failed(f"downloading {hub_file.reference} failed: {str(exc).strip().splitlines()[0]}") from None
    except httpx.TransportError as exc:  # the connection failed or was cut, after huggingface_hub's own retries
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise HubUnreachable(f"downloading {hub_file.reference} failed: {why}") from None
    except (OSError, httpx.HTTPError) as exc:
        raise ModelError(f"downloading {hub_file.reference} failed: {str(exc).strip().splitlines()[0]}") from None
    path = Path(local)
    verify(path, hub_file, size_bytes=size_bytes, sha256=sha256, log=progress)
    return path


@dataclass(frozen=True)
class InstalledFile:
    repo: str
    file: str
    commit: str
    path: Path
    size_bytes: int


def installed_files() -> list[InstalledFile]:
    """Every GGUF in the Hub cache, sorted by repo and file."""
    require_hub()
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(hub_cache_dir())
    except CacheNotFound:
        return []
    found = [
        InstalledFile(repo.repo_id, str(f.file_path.relative_to(rev.snapshot_path)), rev.commit_hash, f.file_path, f.size_on_disk)
        for repo in info.repos
        if repo.repo_type == "model"
        for rev in repo.revisions
        for f in rev.files
        if f.file_name.endswith(".gguf")
    ]
    return sorted(found, key=lambda i: (i.repo, i.file, i.commit))
