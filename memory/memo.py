"""Values computed from immutable objects, remembered by the objects' identity.

The pipeline derives the same things from the same frozen values turn after turn (a rule's
constraint, the hash of a set of constraints). Keyed on equality, a cache hashes and compares
whole model trees on every lookup, which costs about what it saves; keyed on identity, a lookup
is one dict access. A memo keeps a reference to the objects of every key it holds, so no other
object can take their ids while the entry stands; it forgets everything at once when full.

Only for objects that are never changed in place (frozen models, tuples, strings): a memo
would not notice the change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import is_
from typing import Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """`memo.get(objects, compute)` is `compute()`, run once per tuple of the very same objects
    (compared with `is`, in order) while the entry is remembered."""

    def __init__(self, *, maxsize: int = 512) -> None:
        self._maxsize = maxsize
        self._entries: dict[tuple[int, ...], tuple[tuple[object, ...], V]] = {}
        self._lock = threading.Lock()

    def get(self, objects: tuple[object, ...], compute: Callable[[], V]) -> V:
        key = tuple(map(id, objects))
        hit = self._entries.get(key)
        # Equal keys hold as many ids; the objects kept are the ones those ids belong to.
        if hit is not None and all(map(is_, hit[0], objects)):
            return hit[1]
        value = compute()
        with self._lock:
            if len(self._entries) >= self._maxsize:
                self._entries.clear()
            self._entries[key] = (objects, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


__all__ = ["IdentityMemo"]
