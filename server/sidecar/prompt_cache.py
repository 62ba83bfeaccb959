"""`loreguard cache list|clear`: the NPCs' evaluated prompts a sidecar keeps in DATA/prompt-cache
(`prompt_states`), shown and cleared."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loreguard.server.inference.prompt_states import StateFileError, read_header, state_files


@dataclass(frozen=True)
class CachedPrompt:
    npc_id: str
    tokens: int
    size_bytes: int
    model_file: str
    #: Seconds since a sidecar last wrote or loaded it.
    idle_s: float
    path: Path
    #: Why it cannot be read ("" when it can); a sidecar rebuilds such a file.
    problem: str = ""


def cached_prompts(folder: Path) -> Iterator[CachedPrompt]:
    """The files in `folder`, least recently used first; only their headers are read."""
    now = time.time()
    for path in state_files(folder):
        stat = path.stat()
        with path.open("rb") as f:
            head = f.read(1 << 16)
        try:
            header, _ = read_header(head)
        except StateFileError as exc:
            yield CachedPrompt(path.stem, 0, stat.st_size, "", now - stat.st_mtime, path, str(exc))
            continue
        yield CachedPrompt(
            npc_id=str(header["owner"]), tokens=int(header["n_tokens"]), size_bytes=stat.st_size,  # type: ignore[call-overload]
            model_file=str(header.get("model_file", "")), idle_s=max(0.0, now - stat.st_mtime), path=path,
        )  # fmt: skip


def describe(entry: CachedPrompt) -> str:
    if entry.problem:
        return f"{entry.path.name}: unreadable ({entry.problem}); rebuilt when next needed"
    return (
        f"{entry.npc_id}: {entry.tokens} tokens, {entry.size_bytes / 2**20:.1f} MiB, {entry.model_file or '?'}, "
        f"used {_ago(entry.idle_s)}"
    )


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def clear(folder: Path) -> tuple[int, int]:
    """Delete every state file (and the model hashes remembered beside them); (files, bytes)."""
    files = state_files(folder)
    freed = 0
    for path in files:
        freed += path.stat().st_size
        path.unlink(missing_ok=True)
    (folder / "model-sha256.json").unlink(missing_ok=True)
    return len(files), freed
