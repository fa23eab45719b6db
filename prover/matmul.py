"""Integer matmul accumulation with zero points and bias, and its value range.

The accumulator is the exact sum `sum_k (a_k - a_zp) * (w_k - w_zp) + bias`.
The kernel's meaning is the exact integer; where that sum may leave int32
(which ONNX Runtime would wrap), `accumulator_range` reports it and
`check_fits_int32` refuses the shape rather than silently wrapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .domain import Domain, KernelError
from .inttypes import INT32, IntType


def dot(
    d: Domain, xs: Sequence[Any], ws: Sequence[int], x_zp: int, w_zp: int, bias: int = 0
) -> Any:
    """One accumulator: sum_k (x_k - x_zp) * (w_k - w_zp) + bias (written once, any domain)."""
    if len(xs) != len(ws):
        raise KernelError(f"dot product of lengths {len(xs)} and {len(ws)}")
    acc = d.const(int(bias))
    for x, w in zip(xs, ws, strict=True):
        coeff = int(w) - int(w_zp)
        if coeff:
            acc = acc + (x - int(x_zp)) * coeff
    return acc


def matmul_acc(
    a: np.ndarray, w: np.ndarray, a_zp: Any = 0, w_zp: Any = 0, bias: Any = None
) -> np.ndarray:
    """Vectorised concrete accumulation: (a - a_zp) @ (w - w_zp) + bias in int64.

    `a` is [..., M, K], `w` is [..., K, N]; `a_zp` may be per-row ([M] or scalar),
    `w_zp` per-column ([N] or scalar), `bias` is [N] or None.
    """
    a64 = np.asarray(a, dtype=np.int64)
    w64 = np.asarray(w, dtype=np.int64)
    a_zp = np.asarray(a_zp, dtype=np.int64)
    if a_zp.ndim == 1:
        a_zp = a_zp[:, None]
    acc = np.matmul(a64 - a_zp, w64 - np.asarray(w_zp, dtype=np.int64))
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return acc


@dataclass(frozen=True)
class AccRange:
    """Per-column accumulator interval [lo, hi] (inclusive)."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @property
    def overall(self) -> tuple[int, int]:
        return min(self.lo), max(self.hi)

    def fits(self, t: IntType = INT32) -> bool:
        return t.min <= min(self.lo) and max(self.hi) <= t.max


def accumulator_range(
    w: np.ndarray, w_zp: Any, a_type: IntType, a_zp: int, bias: Any = None
) -> AccRange:
    """Exact per-column range of the accumulator for constant weights `w` [K, N].

    Each term (a - a_zp) * c with a in a_type's range is extremal at an end of
    that range, and the terms are independent, so the bounds are attained.
    """
    w = np.asarray(w)
    if w.ndim != 2:
        raise KernelError(f"weights must be [K, N], got shape {w.shape}")
    zp = np.asarray(w_zp, dtype=np.int64)
    zp_max = int(abs(zp).max()) if zp.size else 0
    coeff: np.ndarray
    if w.dtype.kind in "iu" and w.dtype.itemsize == 1 and zp_max <= 255:
        # 8-bit weights: coefficients fit int16 (|w - w_zp| <= 510), summed in int64; a
        # quarter of the int64 form's memory traffic on a large conv's weights
        coeff = w.astype(np.int16) - zp.astype(np.int16)
    elif w.dtype.kind in "iu" and w.dtype.itemsize == 2 and zp_max <= 1 << 20:
        coeff = w.astype(np.int32) - zp.astype(np.int32)  # |w - w_zp| < 2^21
    else:
        coeff = np.asarray(w, dtype=np.int64) - zp
    x_lo, x_hi = a_type.min - int(a_zp), a_type.max - int(a_zp)
    # x_lo <= x_hi, so a term c*x is least at x_lo for c >= 0 and at x_hi for c < 0
    pos = np.maximum(coeff, 0).sum(axis=0, dtype=np.int64)
    neg = coeff.sum(axis=0, dtype=np.int64) - pos
    lo = pos * x_lo + neg * x_hi
    hi = pos * x_hi + neg * x_lo
    if bias is not None:
        b = np.asarray(bias, dtype=np.int64)
        lo, hi = lo + b, hi + b
    return AccRange(tuple(lo.tolist()), tuple(hi.tolist()))  # Python ints


def check_fits_int32(r: AccRange, what: str = "accumulator") -> None:
    """Raise if the accumulator may leave int32 (the kernel never wraps silently)."""
    if not r.fits(INT32):
        lo, hi = r.overall
        raise KernelError(f"{what} range [{lo}, {hi}] exceeds int32")
