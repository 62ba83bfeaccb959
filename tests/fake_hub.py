"""A local stand-in for the Hugging Face Hub: just what `hf_hub_download` calls for one file.

`HEAD /{repo}/resolve/{revision}/{file}` answers with the headers the Hub sends for an LFS file
(X-Repo-Commit, ETag, X-Linked-Etag with the sha256, X-Linked-Size, Content-Length) and `GET`
serves the bytes, honouring `Range: bytes=N-` with 206. Knobs make it misbehave the ways a real
network does: cut the first transfer half way, stall it half way (so a test can kill the client
mid-transfer), serve corrupt bytes under the true checksum, or refuse a repo as gated. Every request is logged so a test can see what the client asked.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: The fake repo and file the model tests serve the embedded GGUF as.
REPO, FILE = "fake/smol-GGUF", "smol.gguf"
REFERENCE = f"hf:{REPO}/{FILE}"


@dataclass
class FakeFile:
    data: bytes
    #: Bytes served instead of `data` (a corrupt transfer); the headers still describe `data`.
    served: bytes | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class FakeHub:
    files: dict[tuple[str, str], FakeFile] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    #: Cut the connection after this many body bytes, on the first GET only.
    cut_after: int | None = None
    #: Stall the first GET after this many body bytes: `stalled` is set, and the transfer waits
    #: for `release` (set when the hub stops), then ends without the rest.
    stall_after: int | None = None
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    #: (method, path, Range header, Authorization header) of every request.
    requests: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    url: str = ""

    def add(self, repo: str, file: str, data: bytes, *, served: bytes | None = None) -> FakeFile:
        self.files[(repo, file)] = FakeFile(data, served)
        return self.files[(repo, file)]

    def gets(self) -> list[tuple[str, str, str | None, str | None]]:
        return [r for r in self.requests if r[0] == "GET"]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def _find(self) -> tuple[str, FakeFile] | None:
            parts = self.path.split("?")[0].lstrip("/").split("/")
            if len(parts) < 5 or parts[2] != "resolve":
                return None
            repo, file = "/".join(parts[:2]), "/".join(parts[4:])
            found = hub.files.get((repo, file))
            return (repo, found) if found else None

        def _refuse(self) -> bool:
            found = self._find()
            repo = "/".join(self.path.lstrip("/").split("/")[:2])
            if repo in hub.gated:
                self.send_response(401)
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", "Access to model is restricted.")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            if found is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            return False

        def _headers(self, f: FakeFile, length: int) -> None:
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{f.sha256}"')
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(len(f.data)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(length))

        def do_HEAD(self) -> None:
            with lock:
                hub.requests.append(("HEAD", self.path, self.headers.get("Range"), self.headers.get("Authorization")))
            if self._refuse():
                return
            found = self._find()
            assert found is not None
            self.send_response(200)
            self._headers(found[1], len(found[1].data))
            self.end_headers()

        def do_GET(self) -> None:
            with lock:
                hub.requests.append(("GET", self.path, self.headers.get("Range"), self.headers.get("Authorization")))
                first_get = len(hub.gets()) == 1
            if self._refuse():
                return
            found = self._find()
            assert found is not None
            f = found[1]
            body = f.served if f.served is not None else f.data
            start = 0
            ranged = self.headers.get("Range")
            if ranged and ranged.startswith("bytes="):
                start = int(ranged[6:].split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self._headers(f, len(body) - start)
            self.end_headers()
            chunk = body[start:]
            if first_get and hub.stall_after is not None:
                try:
                    self.wfile.write(chunk[: hub.stall_after])
                    self.wfile.flush()
                except OSError:
                    return
                hub.stalled.set()
                hub.release.wait(300)
                self.close_connection = True
                return
            if first_get and hub.cut_after is not None:
                self.wfile.write(chunk[: hub.cut_after])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(chunk)

    return Handler


@contextmanager
def fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


def cache_leftovers(home: Path) -> list[str]:
    """Files under the Hub cache other than lock files, the refs that name a commit and the cache tag."""
    return sorted(
        str(p.relative_to(home))
        for p in home.rglob("*")
        if p.is_file() and ".locks" not in p.parts and "refs" not in p.parts and p.name != "CACHEDIR.TAG"
    )


def hub_environment(hub: FakeHub, home: str, *, offline: bool = False) -> dict[str, str]:
    """The variables that point `huggingface_hub` at the fake Hub and a private cache."""
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": home,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "1" if offline else "0",
    }
    return env
