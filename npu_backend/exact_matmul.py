"""The integer accumulation `(a - a_zp) @ (w - w_zp) + bias`, fast where provably exact.

float64 represents every integer of magnitude below 2^53 exactly, and a sum or product
of such integers whose exact value is also below 2^53 is computed exactly (IEEE 754
rounds only when the exact result is not representable). If every |product| is at
most max|a - a_zp| * max|w - w_zp| and K such terms are summed, every partial sum a
BLAS kernel forms, in any order or blocking, is at most K times that bound; so when
`K * max|a - a_zp| * max|w - w_zp| < 2^53` the float64 matmul equals the int64 one.
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


def _max_abs(x: np.ndarray) -> int:
    return int(np.abs(x).max()) if x.size else 0


def exact_matmul(
    a: np.ndarray, w: np.ndarray, a_zp: Any = 0, w_zp: Any = 0, bias: Any = None
) -> np.ndarray:
    """`matmul_acc(a, w, a_zp, w_zp, bias)` as int64, by float64 BLAS when provably exact."""
    if np.ndim(a_zp) or np.ndim(w) < 2:  # per-row zero points: the kernel's own form
        return matmul_acc(a, w, a_zp, w_zp, bias)
    a64 = np.asarray(a, dtype=np.int64) - np.int64(a_zp)
    w64 = np.asarray(w, dtype=np.int64) - np.asarray(w_zp, dtype=np.int64)
    if not float64_is_exact(_max_abs(a64), _max_abs(w64), w64.shape[-2]):
        return matmul_acc(a, w, a_zp, w_zp, bias)
    acc = np.matmul(a64.astype(np.float64), w64.astype(np.float64)).astype(np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return acc


__all__ = ["EXACT_LIMIT", "float64_is_exact", "exact_matmul"]
