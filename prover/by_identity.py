"""Answers kept by the identity of the object they are about.

Several layers keep an answer about a large immutable object (an epilogue of thousands of
columns, a lookup table) that is asked about again and again while equal copies of it are
rare: hashing or comparing it whole would cost what the answer saves. `ByIdentity` keys
by `id`, and keeps the object in the entry, so its id cannot be reused by another object
while the entry lives; an optional hashable `extra` (a table loaded with an epilogue) is
part of the key. Full, it starts over.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class ByIdentity(Generic[V]):
    """A cache of answers by the identity of an object (module docstring)."""

    def __init__(self, max_size: int = 256) -> None:
        self.max_size = max_size
        self._entries: dict[tuple[int, Hashable], tuple[Any, V]] = {}

    def get(self, obj: Any, extra: Hashable = None) -> V | None:
        """The answer kept for this very object (and `extra`), else None."""
        hit = self._entries.get((id(obj), extra))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: Any, value: V, extra: Hashable = None) -> V:
        """Keep `value` for `obj` (and `extra`); returns it."""
        if len(self._entries) >= self.max_size:
            self._entries.clear()
        self._entries[(id(obj), extra)] = (obj, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
