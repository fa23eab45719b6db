"""The integer accumulation `(a - a_zp) @ (w - w_zp) + bias`, fast where provably exact.

float64 represents every integer of magnitude below 2^53 exactly, and a sum or product
of such integers whose exact value is also below 2^53 is computed exactly (IEEE 754
rounds only when the exact result is not representable). If every |product| is at
most max|a - a_zp| * max|w - w_zp| and K such terms are summed, every partial sum a
BLAS kernel forms, in any order or blocking, is at most K times that bound; so when
`K * max|a - a_zp| * max|w - w_zp| < 2^53` the float64 matmul equals the int64 one,
provided the subtraction itself is exact: a, the zero points and their differences are
converted to float64 first, so each of them must also be below 2^53 in magnitude
(int64 operands near a large zero point can have a small difference yet round).
Otherwise the int64 matmul (the kernel's `prover.matmul.matmul_acc`) runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prover.matmul import matmul_acc

EXACT_LIMIT = 1 << 53


def float64_is_exact(a_max: int, w_max: int, k: int) -> bool:
    """True when K products bounded by a_max * w_max sum exactly in float64."""
    return int(k) * int(a_max) * int(w_max) < EXACT_LIMIT


def _bounds(x: np.ndarray, zp: Any) -> tuple[int, int]:
    """(max|x - zp|, max(|x|, |zp|)) from the extremes of x and of zp (no int64 copy).

    The second bound matters as much as the first: x and zp are converted to float64
    before the subtraction, so each must be exact there even when x - zp is small.
    """
    z = np.asarray(zp, dtype=np.int64)
    zlo, zhi = int(z.min()), int(z.max())
    if not x.size:
        return 0, max(abs(zlo), abs(zhi))
    lo, hi = int(x.min()), int(x.max())
    return max(abs(hi - zlo), abs(lo - zhi)), max(abs(lo), abs(hi), abs(zlo), abs(zhi))


def exact_matmul(
    a: np.ndarray, w: np.ndarray, a_zp: Any = 0, w_zp: Any = 0, bias: Any = None
) -> np.ndarray:
    """`matmul_acc(a, w, a_zp, w_zp, bias)` as int64, by float64 BLAS when provably exact."""
    a, w = np.asarray(a), np.asarray(w)
    if np.ndim(a_zp) or w.ndim < 2 or a.dtype.kind not in "iu" or w.dtype.kind not in "iu":
        return matmul_acc(a, w, a_zp, w_zp, bias)  # per-row zero points: the kernel's own form
    (a_max, a_mag), (w_max, w_mag) = _bounds(a, a_zp), _bounds(w, w_zp)
    # every operand, zero point and difference is exact in float64 (below 2^53), and
    # so is every product and partial sum (float64_is_exact)
    if (
        not float64_is_exact(a_max, w_max, w.shape[-2])
        or max(a_mag, w_mag, a_max, w_max) >= EXACT_LIMIT
    ):
        return matmul_acc(a, w, a_zp, w_zp, bias)
    af = a.astype(np.float64) - float(a_zp)
    wf = w.astype(np.float64) - np.asarray(w_zp, dtype=np.float64)
    acc = np.matmul(af, wf).astype(np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return acc


__all__ = ["EXACT_LIMIT", "float64_is_exact", "exact_matmul"]
