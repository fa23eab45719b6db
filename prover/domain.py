"""The two interpretations of every kernel primitive.

Each primitive in the kernel is written once against the small `Domain`
interface below. `NUMPY` evaluates it concretely on int64 arrays (vectorised);
`Z3` builds a signed bit-vector term of a fixed width (64 bits by default, wide
enough for every int32 x int32 product the kernel forms).

Integers are mathematical integers in both interpretations: the kernel keeps
every intermediate inside int64 (documented per primitive) wherever the
primitive's precondition holds, and `bounds.py` bounds every value of an
obligation, so the numpy procedures decline and the SMT encoding widens its
bit-vectors rather than wrap. Wrap-around is only ever explicit (`wrap`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .by_identity import ByIdentity
from .errors import BadInput
from .lazy import lazy_module

if TYPE_CHECKING:
    import z3
else:
    z3 = lazy_module("z3")


class KernelError(BadInput, ValueError):
    """Bad input to a kernel primitive (a shift out of range, a table of the wrong size...)."""


class Domain:
    """Integer operations shared by the concrete and the symbolic interpretation."""

    name = "abstract"

    def const(self, v: int) -> Any:
        raise NotImplementedError

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def tdiv_pow2(self, a: Any, e: int) -> Any:
        """Division by 2**e truncating toward zero."""
        raise NotImplementedError

    def shr(self, a: Any, e: int) -> Any:
        """Arithmetic shift right by a constant (floor division by 2**e)."""
        raise NotImplementedError

    def band(self, a: Any, mask: int) -> Any:
        """Bitwise and with a non-negative constant mask (two's complement semantics)."""
        raise NotImplementedError

    def floordiv(self, a: Any, c: int) -> Any:
        """Floor division by a positive constant."""
        raise NotImplementedError

    def lut(self, table: Sequence[int], index: Any) -> Any:
        """`table[index]` for an index in range(len(table))."""
        raise NotImplementedError

    def step_count(self, x: Any, thresholds: Sequence[int]) -> Any:
        """Number of thresholds t (sorted ascending) with x >= t."""
        raise NotImplementedError

    def land(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    # min/max/clamp are written once on top of `where`.
    def min(self, a: Any, b: Any) -> Any:
        return self.where(a <= b, a, b)

    def max(self, a: Any, b: Any) -> Any:
        return self.where(a >= b, a, b)

    def clamp(self, x: Any, lo: int, hi: int) -> Any:
        return self.min(self.max(x, self.const(lo)), self.const(hi))


class NumpyDomain(Domain):
    """Concrete interpretation: numpy int64 arrays (or scalars)."""

    name = "numpy"

    def const(self, v: int) -> np.int64:
        return np.int64(v)

    def where(self, cond, a, b):
        return np.where(cond, a, b).astype(np.int64, copy=False)

    def clamp(self, x, lo, hi):
        # On an int64 array, max then min with int64 bounds is exactly `Domain.clamp`'s
        # two `where`s (the same integers, dtype and shape) in two ufunc calls instead of
        # six; anything else (scalars, other dtypes) takes the shared definition.
        if type(x) is np.ndarray and x.dtype == np.int64 and x.ndim:
            return np.minimum(np.maximum(x, np.int64(lo)), np.int64(hi))
        return Domain.clamp(self, x, lo, hi)

    def tdiv_pow2(self, a, e):
        a = np.asarray(a, dtype=np.int64)
        q = np.abs(a) >> np.int64(e)  # |a| // 2^e, as a shift
        return np.where(a < 0, -q, q).astype(np.int64, copy=False)

    def shr(self, a, e):
        return np.right_shift(np.asarray(a, dtype=np.int64), np.int64(e))

    def band(self, a, mask):
        return np.bitwise_and(np.asarray(a, dtype=np.int64), np.int64(mask))

    def floordiv(self, a, c):
        return np.floor_divide(np.asarray(a, dtype=np.int64), np.int64(c))

    def lut(self, table, index):
        t = table_array(table)
        i = np.asarray(index, dtype=np.int64)
        # numpy would silently wrap a negative index; the symbolic form cannot.
        if i.size and (i.min() < 0 or i.max() >= len(t)):
            raise KernelError(
                f"LUT index out of range [0, {len(t) - 1}]: {int(i.min())}..{int(i.max())}"
            )
        return t[i]

    def step_count(self, x, thresholds):
        t = np.asarray(thresholds, dtype=np.int64)
        return np.searchsorted(t, np.asarray(x, dtype=np.int64), side="right").astype(np.int64)

    def land(self, a, b):
        return np.logical_and(a, b)


class IntPointDomain(NumpyDomain):
    """The concrete interpretation at one point, in Python integers (a counterexample's
    replay). For a point where every value the evaluation forms is below 2^63 in magnitude
    (`bounds.fits_at`) these are exactly the int64 values the array interpretation computes,
    at a fraction of the cost of numpy scalars; the caller checks that bound. Only for
    primitives built from the `Domain` operations and elementwise arithmetic
    (`counterexample.POINT_PRIMS`; a `requant_float` gives a 0-d int64 array)."""

    def const(self, v):
        return int(v)

    def where(self, cond, a, b):
        return a if cond else b

    def clamp(self, x, lo, hi):
        return min(max(x, lo), hi)

    def tdiv_pow2(self, a, e):
        q = abs(a) >> e  # |a| // 2^e, as a shift
        return -q if a < 0 else q

    def shr(self, a, e):
        return a >> e

    def band(self, a, mask):
        return a & mask  # two's complement, as int64's low bits

    def floordiv(self, a, c):
        return a // c

    def lut(self, table, index):
        i = int(index)
        if not 0 <= i < len(table):
            raise KernelError(f"LUT index out of range [0, {len(table) - 1}]: {i}..{i}")
        return int(table[i])

    def step_count(self, x, thresholds):
        return bisect.bisect_right(thresholds, x)

    def land(self, a, b):
        return bool(a) and bool(b)


# int64 arrays of lookup tables given as tuples, by identity: a term's table is converted
# once, not at every evaluation
_TABLES_MAX = 64
_TABLES: ByIdentity[np.ndarray] = ByIdentity(_TABLES_MAX)
TABLE_CACHE_MAX = 1024  # entries; longer tables are converted at each use


def table_array(table: Sequence[int]) -> np.ndarray:
    """`np.asarray(table, dtype=np.int64)`, read-only, kept per tuple object."""
    if not isinstance(table, tuple) or len(table) > TABLE_CACHE_MAX:
        return np.asarray(table, dtype=np.int64)
    hit = _TABLES.get(table)
    if hit is not None:
        return hit
    t = np.asarray(table, dtype=np.int64)
    t.setflags(write=False)
    return _TABLES.put(table, t)


class Z3Domain(Domain):
    """Symbolic interpretation: Z3 signed bit-vector terms of width `width`."""

    name = "z3"

    def __init__(self, width: int = 64) -> None:
        self.width = width

    def var(self, name: str) -> z3.BitVecRef:
        return z3.BitVec(name, self.width)

    def const(self, v: int) -> z3.BitVecRef:
        return z3.BitVecVal(int(v), self.width)

    def lift(self, v: Any) -> z3.BitVecRef:
        if isinstance(v, z3.BitVecRef):
            if v.size() != self.width:
                raise KernelError(f"bit-vector of width {v.size()} in a {self.width}-bit domain")
            return v
        return self.const(int(v))

    def where(self, cond, a, b):
        return z3.If(cond, self.lift(a), self.lift(b))

    def tdiv_pow2(self, a, e):
        # bvsdiv truncates toward zero, exactly the C semantics.
        return self.lift(a) / self.const(1 << e)

    def shr(self, a, e):
        return self.lift(a) >> e

    def band(self, a, mask):
        return self.lift(a) & self.const(mask)

    def floordiv(self, a, c):
        a = self.lift(a)
        q = a / self.const(c)  # truncates toward zero
        return z3.If(z3.And(a < 0, q * c != a), q - 1, q)

    def lut(self, table, index):
        index = self.lift(index)
        n = len(table)

        # Balanced selection on the index keeps the term shallow for the solvers.
        def pick(lo: int, hi: int) -> z3.BitVecRef:
            if hi - lo == 1:
                return self.const(int(table[lo]))
            mid = (lo + hi) // 2
            return z3.If(index < mid, pick(lo, mid), pick(mid, hi))

        return pick(0, n)

    def step_count(self, x, thresholds):
        x = self.lift(x)
        terms = [z3.If(x >= int(t), self.const(1), self.const(0)) for t in thresholds]
        if not terms:
            return self.const(0)
        return z3.Sum(terms) if len(terms) > 1 else terms[0]

    def land(self, a, b):
        return z3.And(a, b)


NUMPY = NumpyDomain()
INT_POINT = IntPointDomain()
Z3 = Z3Domain()
