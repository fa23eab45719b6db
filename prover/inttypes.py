"""Integer storage types and the conversions between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .domain import Domain, KernelError


@dataclass(frozen=True)
class IntType:
    """A fixed-width two's complement (or unsigned) integer type."""

    name: str
    bits: int
    signed: bool

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def size(self) -> int:
        """Number of distinct values."""
        return 1 << self.bits

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)

    def contains(self, v: int) -> bool:
        return self.min <= v <= self.max

    def numpy_dtype(self) -> np.dtype:
        """The numpy storage dtype (int4/uint4 are held in int8/uint8)."""
        storage = {8: "int8", 16: "int16", 32: "int32", 64: "int64", 4: "int8"}[self.bits]
        if not self.signed:
            storage = "u" + storage
        return np.dtype(storage)


INT4 = IntType("int4", 4, True)
UINT4 = IntType("uint4", 4, False)
INT8 = IntType("int8", 8, True)
UINT8 = IntType("uint8", 8, False)
INT16 = IntType("int16", 16, True)
UINT16 = IntType("uint16", 16, False)
INT32 = IntType("int32", 32, True)
UINT32 = IntType("uint32", 32, False)
INT64 = IntType("int64", 64, True)

TYPES: dict[str, IntType] = {
    t.name: t for t in (INT4, UINT4, INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64)
}

INT32_MIN = INT32.min
INT32_MAX = INT32.max


def int_type(name: str) -> IntType:
    """Look up an integer type by name, with a clear error for unknown names."""
    try:
        return TYPES[name]
    except KeyError:
        raise KernelError(f"unknown integer type {name!r}; known: {', '.join(TYPES)}") from None


def saturate(d: Domain, x: Any, t: IntType) -> Any:
    """Clamp `x` into the range of `t` (saturating conversion)."""
    return d.clamp(x, t.min, t.max)


def wrap(d: Domain, x: Any, t: IntType) -> Any:
    """Two's complement wrap-around conversion of `x` into `t` (C cast semantics)."""
    if t.bits >= 64:
        raise KernelError("wrap to 64 bits is the identity on the kernel's int64 values")
    low = d.band(x, (1 << t.bits) - 1)
    if not t.signed:
        return low
    return d.where(low > t.max, low - t.size, low)


def int_tuple(a: Any) -> tuple[int, ...]:
    """`tuple(int(v) for v in a)` of a 1-D array: an integer array's values at once (its
    Python ints), any other element by element (`int` of each, as that reads it)."""
    arr = np.asarray(a)
    if arr.dtype.kind in "iu" and arr.ndim == 1:
        return tuple(arr.tolist())
    return tuple(int(v) for v in arr)
