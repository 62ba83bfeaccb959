"""Canonical serialization, content hashes, and the memory hash built from them.

One byte string per value, on every machine: keys sorted, no insignificant whitespace, UTF-8,
floats in Python's shortest round-trip form, NaN and infinity refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from loreguard.memory.entries import scope_entries
from loreguard.schemas.memory import ScopeMemory


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a pydantic model or a JSON-compatible value."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """sha256 of `canonical_json(value)`."""
    return sha256_hex(canonical_json(value))


# --- memory hashes ----------------------------------------------------------------------------
#
# A memory hash is built in two levels so that a batch re-hashes only what it wrote: each entry's
# canonical JSON is hashed, a scope hash covers its sorted (kind, id, entry hash) lines, and a
# memory hash covers the store's next sequence number, then sorted (scope, scope hash) lines.
# Kinds, ids, keys and scope names cannot contain tabs or newlines, so these texts are
# unambiguous canonical forms.
#
# The next sequence number is in every memory hash, of any set of scopes, because it names what
# the next write creates (`ep<seq>`, and the `seq` every entry carries) and it is one counter for
# the whole store: two stores with equal hashes then assign equal ids to equal writes, whatever
# route (direct writes, a save slot, a replay) brought each one there.

#: Per scope: (kind, entry id) -> sha256 of the entry's canonical JSON.
EntryDigests = Mapping[tuple[str, str], str]


def entry_line(kind: str, key: str, digest: str) -> str:
    """One entry's line in its scope's hash text."""
    return f"{kind}\t{key}\t{digest}"


def scope_lines(digests: EntryDigests) -> list[str]:
    """The sorted lines a scope's hash covers (`scope_hash_of`); a store keeps them sorted as
    entries change, so a batch re-hashes a scope without formatting and sorting it again."""
    return sorted(entry_line(kind, key, digest) for (kind, key), digest in digests.items())


def scope_hash_of(digests: EntryDigests) -> str:
    """A scope's hash from its entries' digests."""
    return sha256_hex("\n".join(scope_lines(digests)))


def scope_hash_of_lines(lines: list[str]) -> str:
    """`scope_hash_of`, from the scope's sorted lines (`scope_lines`)."""
    return sha256_hex("\n".join(lines))


def entry_digests(scope: ScopeMemory) -> dict[tuple[str, str], str]:
    """The digest of every entry of a scope, keyed by (kind, entry id)."""
    return {(kind.value, key): sha256_hex(canonical_json(entry)) for kind, key, entry in scope_entries(scope)}


def scope_hash(scope: ScopeMemory) -> str:
    """sha256 over one scope's entries (see the two levels above)."""
    return scope_hash_of(entry_digests(scope))


def scopes_hash(hashes: Iterable[tuple[str, str]]) -> str:
    """The hash of several scopes' contents alone, from their (name, scope hash) pairs: what an
    interaction read, whatever the store's sequence counter (which other NPCs' writes move)."""
    return sha256_hex("\n".join(sorted(f"{name}\t{digest}" for name, digest in hashes)))


def combine_scope_hashes(hashes: Iterable[tuple[str, str]], *, next_seq: int) -> str:
    """The memory hash of several scopes from their (name, scope hash) pairs and the store's
    next sequence number. The number is the first line, so no scope name can be mistaken for it."""
    return sha256_hex("\n".join([f"next_seq\t{next_seq}", *sorted(f"{name}\t{digest}" for name, digest in hashes)]))


def memory_hash(scopes: Iterable[ScopeMemory], *, next_seq: int) -> str:
    """sha256 over the scopes' canonical serializations, ordered by scope name, and the next
    sequence number; equal on every machine and in every process for equal memory."""
    return combine_scope_hashes(((s.scope, scope_hash(s)) for s in scopes), next_seq=next_seq)


def memory_hash_of(digests_by_scope: Mapping[str, EntryDigests], *, next_seq: int) -> str:
    """The memory hash of scopes given as their entries' digests."""
    return combine_scope_hashes(((name, scope_hash_of(d)) for name, d in digests_by_scope.items()), next_seq=next_seq)
