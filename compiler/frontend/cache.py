"""A small per-process cache of checked models and the frontend's IR, for a process that
checks the same model more than once (a `prover zoo` worker collects a model's obligations,
then assembles its verdicts: the same file through the same frontend twice).

Keyed by the model file's digest (and, for the IR, the reference profile it was read
under); only models without external data are cached. The IR is kept as a snapshot the
passes never see (`compiler.api._snapshot`: new nodes, edge lists and attribute dicts,
attribute values shared, as the passes never modify those in place), and every hit is a
fresh snapshot of it, so a run cannot change what the next one gets.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class FrontendCache:
    """Least recently used entries: at most `size` of them, and at most `max_bytes` by the
    cost each is put with (its model file's size)."""

    def __init__(self, size: int = 64, max_bytes: int = 256 << 20) -> None:
        self.size, self.max_bytes = size, max_bytes
        self._items: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def get(self, key: tuple[Any, ...]) -> Any:
        """The value stored under `key`, or None."""
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return item[0]

    def put(self, key: tuple[Any, ...], value: Any, cost: int = 0) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if cost > self.max_bytes:
            return
        self._items[key] = (value, cost)
        self._bytes += cost
        while len(self._items) > self.size or self._bytes > self.max_bytes:
            _, (_, c) = self._items.popitem(last=False)
            self._bytes -= c
