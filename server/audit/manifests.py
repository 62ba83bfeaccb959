"""How the audit log stores a scope's memory image: a manifest of content-defined chunks.

A record names each scope it read by the scope's hash; the blob under that hash lists the
scope's entries as (kind, id, entry digest), each entry a blob of its own. A thousand-entry
memory listed whole in every record cost ~90 KB per interaction, nearly all of it the same as the
record before. So the list is cut into chunks where an entry's digest says so (about one entry
in 32), each chunk a blob named by its own hash: an interaction that appends one memory stores
one changed chunk and the short list of chunk hashes, and a chunk shared with earlier records is
stored once. The cut depends on content only, so the same memory always gives the same chunks.

Manifests of the first format (`{"scope", "entries"}`) are still read: logs and packages
written before stay replayable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from loreguard.memory import canonical_json, sha256_hex

#: An entry whose digest's first 16 bits are below this ends a chunk (1 in 32 on average).
_CUT_BELOW = 0x10000 // 32


def chunked(
    scope: str, rows: list[list[str]], memo: dict[tuple[tuple[str, ...], ...], tuple[str, str]] | None = None
) -> tuple[str, dict[str, str]]:
    """The manifest of a scope's sorted (kind, id, digest) rows, and its chunk blobs by hash.
    `memo` remembers chunks by their rows (a caller's cache; cleared when it grows large)."""
    chunks: dict[str, str] = {}
    names: list[str] = []
    start = 0
    last = len(rows) - 1
    for i, row in enumerate(rows):
        if i == last or int(row[2][:4], 16) < _CUT_BELOW:
            part = rows[start : i + 1]
            key = tuple(map(tuple, part))
            made = memo.get(key) if memo is not None else None
            if made is None:
                text = canonical_json({"entries": part}).decode("utf-8")
                made = (sha256_hex(text), text)
                if memo is not None:
                    if len(memo) > 4_096:  # a few records' worth of every NPC's chunks
                        memo.clear()
                    memo[key] = made
            chunks[made[0]] = made[1]
            names.append(made[0])
            start = i + 1
    return canonical_json({"scope": scope, "chunks": names}).decode("utf-8"), chunks


def entry_rows(manifest: Mapping[str, Any], blobs: Mapping[str, Any]) -> Iterator[list[str]]:
    """The (kind, id, digest) rows a manifest lists, either format; `blobs` holds parsed blobs."""
    if "entries" in manifest:
        yield from manifest["entries"]
        return
    for name in manifest["chunks"]:
        yield from blobs[name]["entries"]


def chunk_names(manifest: Mapping[str, Any]) -> list[str]:
    """The chunk blobs a manifest names (none for the first format)."""
    return list(manifest.get("chunks", ()))
