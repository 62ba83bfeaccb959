"""Evaluated prompts kept on disk: an NPC's KV state survives the process, and ships with a game.

Evaluating an NPC's prompt costs seconds a launch (30 s for the demo's two NPCs with the 1.5B on
two cores); restoring its saved KV state costs milliseconds. After an engine evaluates an NPC's
prompt (a warm-up or its first line) it hands the state here; the next launch that asks for the
same prompt loads it instead (`find`, `find_exact`).

One file per NPC (`<npc>-<hash>.lgkv`): a header, the token ids the state holds, the state. A file
is used only when everything that makes it valid matches, each stored in the header and checked
before loading (`StateMaker`): the model file's sha256, the llama.cpp build, the KV cache's layout
(key and value types, flash attention), and the token ids, which must begin with the static
prefix asked for. The reproducible engine also needs the state made its own way (`exact`: the
prefix evaluated from an empty cache in its own `n_batch` chunks, on the same device), or its
replays would differ in the last bits. A file that does not match, or is truncated or corrupt
(its checksum), is never loaded: it is deleted (to be rebuilt and replaced), with one log line
saying why.

Writes go through one writer thread (a temporary file, then a rename), so an engine never waits
on the disk and a crash never leaves half a file under a real name. Disk use is bounded: past
`budget_bytes` the least recently used files go first (loading a file counts as using it).

`shipped` folders hold files written by `loreguard warm` and shipped beside a game's model: read
after the cache folder, never written or deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import re
import struct
import threading
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path

import llama_cpp

from loreguard.server.inference.llama_native import NativeContext
from loreguard.server.inference.model_files import file_sha256
from loreguard.server.inference.sequences import common_prefix

_log = logging.getLogger("loreguard.prompt_states")

#: The file's first bytes; a new layout gets a new number (an old file is then rebuilt).
MAGIC = b"LGKV1\n"
SUFFIX = ".lgkv"
_LENGTH = struct.Struct("<I")


_ANOTHER_PROMPT = "it holds another prompt (the NPC's profile, world or facts changed)"


class StateFileError(ValueError):
    """A state file that must not be loaded; the message says why (one log line)."""


@dataclass(frozen=True)
class StateMaker:
    """What a KV state depends on: a file made under another of these is not loaded."""

    #: sha256 of the whole model file.
    model_sha256: str
    #: The llama.cpp build (llama-cpp-python's version, which pins it): the state's format.
    llama_build: str
    #: The KV cache's layout: `k=<type> v=<type> fa=<flash attention>`.
    kv_layout: str
    #: Where the numbers were computed (`cpu`, or the device and layers offloaded) and the chunk
    #: size of an exact evaluation: what the reproducible engine's exactness needs besides.
    device: str
    n_batch: int

    def refusal(self, other: StateMaker, *, exact: bool) -> str:
        """Why a state made under `other` may not be loaded here; "" when it may."""
        if other.model_sha256 != self.model_sha256:
            return "it was made with another model file"
        if other.llama_build != self.llama_build:
            return f"it was made by another llama.cpp build ({other.llama_build}, here {self.llama_build})"
        if other.kv_layout != self.kv_layout:
            return f"it was made with another KV cache layout ({other.kv_layout}, here {self.kv_layout})"
        if exact and (other.device, other.n_batch) != (self.device, self.n_batch):
            return f"it was evaluated on {other.device} in chunks of {other.n_batch}, here {self.device} in {self.n_batch}"
        return ""


@dataclass(frozen=True)
class PromptState:
    """One NPC's evaluated prompt: the token ids in the KV state, and the state."""

    owner: str
    tokens: array
    state: bytes = field(repr=False)
    maker: StateMaker
    #: The leading tokens evaluated from an empty cache in `maker.n_batch` chunks (the
    #: reproducible engine's way: what it may load); 0 when made some other way.
    exact: int = 0
    #: The model file's name, for `loreguard cache list` only.
    model_file: str = ""


@dataclass
class PromptStateStats:
    loaded: int = 0
    #: Files found that could not be used (another model, prefix, build; truncated, corrupt).
    rebuilt: int = 0
    written: int = 0
    evicted: int = 0
    write_failures: int = 0


def file_name(owner: str) -> str:
    """A portable file name for an NPC id: its readable part, and a hash that keeps ids apart."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", owner)[:48].strip(".") or "npc"
    return f"{slug}-{hashlib.sha256(owner.encode()).hexdigest()[:12]}{SUFFIX}"


def encode(entry: PromptState) -> bytes:
    body_tokens = entry.tokens.tobytes() if entry.tokens.itemsize == 4 else array("i", entry.tokens).tobytes()
    header = {
        "owner": entry.owner,
        "n_tokens": len(entry.tokens),
        "state_bytes": len(entry.state),
        "exact": entry.exact,
        "model_file": entry.model_file,
        "maker": vars(entry.maker),
        "sha256": hashlib.sha256(body_tokens + entry.state).hexdigest(),
    }
    raw = json.dumps(header, sort_keys=True).encode()
    return MAGIC + _LENGTH.pack(len(raw)) + raw + body_tokens + entry.state


def read_header(data: bytes) -> tuple[dict[str, object], int]:
    """The header of a state file and where its body starts; `StateFileError` if unreadable."""
    if not data.startswith(MAGIC):
        raise StateFileError("it is not a Loreguard prompt state of this version")
    start = len(MAGIC) + _LENGTH.size
    if len(data) < start:
        raise StateFileError("it is truncated")
    (n,) = _LENGTH.unpack_from(data, len(MAGIC))
    if len(data) < start + n:
        raise StateFileError("it is truncated")
    try:
        header = json.loads(data[start : start + n])
        maker = StateMaker(**header["maker"])
    except (ValueError, TypeError, KeyError) as exc:
        raise StateFileError(f"its header is unreadable ({exc})") from None
    header["maker"] = maker
    return header, start + n


def decode(data: bytes) -> PromptState:
    """A state file's entry, its checksum checked; `StateFileError` if truncated or corrupt."""
    header, body = read_header(data)
    n_tokens, n_state = int(header["n_tokens"]), int(header["state_bytes"])  # type: ignore[call-overload]
    if len(data) != body + 4 * n_tokens + n_state:
        raise StateFileError("it is truncated" if len(data) < body + 4 * n_tokens + n_state else "it has trailing bytes")
    if hashlib.sha256(memoryview(data)[body:]).hexdigest() != header["sha256"]:
        raise StateFileError("it is corrupt (its checksum does not match)")
    tokens = array("i")
    tokens.frombytes(data[body : body + 4 * n_tokens])
    maker = header["maker"]
    assert isinstance(maker, StateMaker)
    return PromptState(
        owner=str(header["owner"]), tokens=tokens, state=data[body + 4 * n_tokens :], maker=maker,
        exact=int(header["exact"]), model_file=str(header.get("model_file", "")),  # type: ignore[call-overload]
    )  # fmt: skip


class PromptStateStore:
    """The cache folder (read and written) and shipped folders (read only) of one model."""

    def __init__(
        self,
        folder: Path | None,
        maker: StateMaker,
        *,
        budget_bytes: int = 1 << 30,
        shipped: tuple[Path, ...] = (),
        model_file: str = "",
    ) -> None:
        self.folder = folder
        #: The model file's name, written in each file for `loreguard cache list`.
        self.model_file = model_file
        self.maker = maker
        self.budget_bytes = budget_bytes
        self.shipped = shipped
        self.stats = PromptStateStats()
        #: Tokens of each owner's state this process loaded or saved (what its file holds now).
        self.known: dict[str, int] = {}
        #: Shipped files refused, with their modification time: not read again while unchanged.
        self._skipped: set[tuple[Path, int]] = set()
        self._writes: queue.Queue[PromptState | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- reading ---------------------------------------------------------------------------

    def find(self, owner: str, tokens: array, *, prefix: int) -> tuple[PromptState | None, int]:
        """The owner's saved state sharing the longest start with `tokens` (which begin with a
        static prefix of `prefix` tokens), and how many tokens it gives; (None, 0) when no valid
        file holds at least that prefix."""
        for path, entry in self._candidates(owner):
            n = common_prefix(entry.tokens, tokens)
            if n >= min(prefix, len(tokens)) and n > 0:
                return entry, n
            self._drop(path, owner, _ANOTHER_PROMPT)
        return None, 0

    def find_exact(self, owner: str, prefix: list[int]) -> PromptState | None:
        """The owner's saved state whose first tokens are exactly `prefix`, evaluated the
        reproducible engine's way under this maker; None when there is none."""
        wanted = array("i", prefix)
        for path, entry in self._candidates(owner):
            if common_prefix(entry.tokens, wanted) < len(wanted):
                self._drop(path, owner, _ANOTHER_PROMPT)
            elif entry.exact == len(wanted) and not self.maker.refusal(entry.maker, exact=True):
                return entry
            # else: the same prompt evaluated another way (the batched engine's): left for that engine
        return None

    def _candidates(self, owner: str) -> list[tuple[Path, PromptState]]:
        """The owner's readable files that fit this maker, the cache's first; each with its path.
        A shipped file refused once is not read again while it is unchanged."""
        out = []
        for folder in self._folders():
            path = folder / file_name(owner)
            try:
                if (path, path.stat().st_mtime_ns) in self._skipped:
                    continue
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                _log.warning("prompt state of %s at %s could not be read (%s); evaluating it", owner, path, exc)
                continue
            try:
                entry = decode(data)
                why = self.maker.refusal(entry.maker, exact=False)
                if not why and entry.owner != owner:
                    why = f"it belongs to {entry.owner!r}"
                if why:
                    raise StateFileError(why)
            except StateFileError as exc:
                self._drop(path, owner, str(exc))
                continue
            if folder == self.folder:
                _touch(path)
            out.append((path, entry))
        return out

    def _drop(self, path: Path, owner: str, why: str) -> None:
        """Never load `path`: say why once; delete it when it is the cache's (rebuilt on the next
        save), else remember to skip it (a shipped file is never deleted)."""
        self.stats.rebuilt += 1
        ours = self.folder is not None and path.parent == self.folder
        _log.warning("prompt state of %s not loaded: %s; %s", owner, why, "evaluating it again" if ours else "skipped")
        if ours:
            path.unlink(missing_ok=True)
        else:
            with contextlib.suppress(OSError):
                self._skipped.add((path, path.stat().st_mtime_ns))

    def _folders(self) -> list[Path]:
        return ([self.folder] if self.folder is not None else []) + list(self.shipped)

    def loaded(self) -> None:
        """An engine loaded a found state (statistics)."""
        with self._lock:
            self.stats.loaded += 1

    # --- writing ---------------------------------------------------------------------------

    def save(self, entry: PromptState) -> None:
        """Write `entry` in the background (replacing the owner's file); no-op without a folder."""
        if self.folder is None or len(entry.state) > self.budget_bytes:
            return
        entry = replace(entry, model_file=entry.model_file or self.model_file)
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="loreguard-prompt-states", daemon=True)
                self._writer.start()
        self._writes.put(entry)

    def flush(self) -> None:
        """Wait until every save asked so far is on disk."""
        self._writes.join()

    def close(self) -> None:
        """Finish the writes asked so far, then stop the writer."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            self._writes.put(None)
            writer.join()

    def _write_loop(self) -> None:
        while True:
            entry = self._writes.get()
            try:
                if entry is None:
                    return
                self._write(entry)
            finally:
                self._writes.task_done()

    def _write(self, entry: PromptState) -> None:
        assert self.folder is not None
        path = self.folder / file_name(entry.owner)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(encode(entry))
            os.replace(temporary, path)
        except OSError as exc:  # a full or read-only disk: the engine goes on without the file
            with contextlib.suppress(OSError):
                temporary.unlink()
            self.stats.write_failures += 1
            _log.warning("prompt state of %s could not be saved (%s)", entry.owner, exc)
            return
        self.stats.written += 1
        self.stats.evicted += keep_within(self.folder, self.budget_bytes, keep=path)


def model_sha256(path: Path, memo: Path | None = None) -> str:
    """sha256 of a model file, read once: remembered in `memo` (a JSON file) by path, size and
    modification time, so a relaunch does not read a gigabyte again."""
    stat = path.stat()
    key, seen = str(path.resolve()), [stat.st_size, stat.st_mtime_ns]
    known: dict[str, list[object]] = {}
    if memo is not None:
        try:
            known = json.loads(memo.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
        if isinstance(known, dict) and known.get(key, [None])[:2] == seen:
            return str(known[key][2])
    sha = file_sha256(path)
    if memo is not None:
        known = known if isinstance(known, dict) else {}
        known[key] = [*seen, sha]
        # A folder that cannot be written: the file is read again next launch, nothing worse.
        with contextlib.suppress(OSError):
            memo.parent.mkdir(parents=True, exist_ok=True)
            temporary = memo.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(known, sort_keys=True), encoding="utf-8")
            os.replace(temporary, memo)
    return sha


def open_prompt_states(
    folder: str | None, budget_mib: int, shipped: tuple[Path, ...], model_path: Path, ctx: NativeContext, device: str
) -> PromptStateStore | None:
    """The store of a loaded model: its cache `folder` (None: none) and shipped folders, the
    `<model>.prompts` folder beside the model file among them when there is one (what `loreguard
    warm` writes and a game ships: read without being asked). None when there is nowhere to look."""
    beside = model_path.with_suffix(".prompts")
    shipped = shipped + ((beside,) if beside.is_dir() and beside not in shipped else ())
    if folder is None and not shipped:
        return None
    cache = Path(folder) if folder is not None else None
    maker = StateMaker(
        model_sha256=model_sha256(model_path, cache / "model-sha256.json" if cache else None),
        llama_build=llama_cpp.__version__,
        kv_layout=ctx.kv_layout,
        device=device,
        n_batch=ctx.n_batch,
    )
    return PromptStateStore(cache, maker, budget_bytes=budget_mib << 20, shipped=shipped, model_file=model_path.name)


def _touch(path: Path) -> None:
    """Mark a cache file used (its mtime orders eviction); a folder that refuses keeps its order."""
    with contextlib.suppress(OSError):
        os.utime(path)


def state_files(folder: Path) -> list[Path]:
    """The state files in `folder`, least recently used first (ties by name)."""
    if not folder.is_dir():
        return []
    files = []
    for path in folder.glob(f"*{SUFFIX}"):
        try:
            files.append((path.stat().st_mtime_ns, path.name, path))
        except FileNotFoundError:
            continue
    return [path for _, _, path in sorted(files)]


def keep_within(folder: Path, budget_bytes: int, *, keep: Path | None = None) -> int:
    """Delete the least recently used state files until the rest fit `budget_bytes`; how many."""
    files = state_files(folder)
    sizes = {path: path.stat().st_size for path in files if path.exists()}
    total, dropped = sum(sizes.values()), 0
    for path in files:
        if total <= budget_bytes:
            break
        if path == keep or path not in sizes:
            continue
        path.unlink(missing_ok=True)
        total -= sizes[path]
        dropped += 1
    return dropped
