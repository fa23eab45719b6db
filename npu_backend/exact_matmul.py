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

float32 is faster still (a wider SIMD lane count) and the same argument holds with 2^24:
K is cut into chunks of kc with `kc * max|a - a_zp| * max|w - w_zp| < 2^24`, each chunk's
float32 matmul is exact, and the chunks are summed in int64. For int8 operands without
zero points kc = 1023, with uint8 ones and a zero point 514.

Large matmuls run BLAS on one thread (threadpoolctl, when installed): on a shared 2-core
machine OpenBLAS's second thread mostly spins and multiplies the CPU time (64x4096x512:
96 ms CPU on 2 threads vs 15 ms on one).
Otherwise the int64 matmul (the kernel's `prover.matmul.matmul_acc`) runs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from typing import Any

import numpy as np

from prover.matmul import matmul_acc

EXACT_LIMIT = 1 << 53
FLOAT32_LIMIT = 1 << 24
MIN_CHUNK = 256  # below this many products per float32 chunk, one float64 matmul is faster
ONE_THREAD_MACS = 1 << 20  # matmuls this large run BLAS single-threaded


def float64_is_exact(a_max: int, w_max: int, k: int) -> bool:
    """True when K products bounded by a_max * w_max sum exactly in float64."""
    return int(k) * int(a_max) * int(w_max) < EXACT_LIMIT


def float32_chunk(a_max: int, w_max: int, k: int) -> int:
    """The most products per float32 chunk that sum exactly (K when all do; 0: none)."""
    per = int(a_max) * int(w_max)
    return int(k) if per == 0 else min(int(k), (FLOAT32_LIMIT - 1) // per)


@lru_cache(maxsize=1)
def _controller() -> Any:
    try:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
    except ImportError:  # an optional speed-up: results do not depend on it
        return None
    return ThreadpoolController()


def _one_blas_thread(macs: int) -> AbstractContextManager[Any]:
    ctl = _controller() if macs >= ONE_THREAD_MACS else None
    return nullcontext() if ctl is None else ctl.limit(limits=1, user_api="blas")


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
    """`matmul_acc(a, w, a_zp, w_zp, bias)` as int64, by float32 or float64 BLAS when
    provably exact (see the module doc)."""
    a, w = np.asarray(a), np.asarray(w)
    if np.ndim(a_zp) or w.ndim < 2 or a.dtype.kind not in "iu" or w.dtype.kind not in "iu":
        return matmul_acc(a, w, a_zp, w_zp, bias)  # per-row zero points: the kernel's own form
    (a_max, a_mag), (w_max, w_mag) = _bounds(a, a_zp), _bounds(w, w_zp)
    k = w.shape[-2]
    biggest = max(a_mag, w_mag, a_max, w_max)
    kc = float32_chunk(a_max, w_max, k) if biggest < FLOAT32_LIMIT else 0
    if kc >= min(k, MIN_CHUNK):
        # operands, zero points and differences exact in float32; each chunk's products
        # and partial sums below 2^24; chunks summed in int64
        af = a.astype(np.float32) - np.float32(a_zp)
        wf = w.astype(np.float32) - np.asarray(w_zp, dtype=np.float32)
        with _one_blas_thread(a.size * w.shape[-1]):
            if kc >= k:
                acc = np.matmul(af, wf).astype(np.int64)
            else:
                acc = np.matmul(af[..., :kc], wf[..., :kc, :]).astype(np.int64)
                for k0 in range(kc, k, kc):
                    acc += np.matmul(af[..., k0 : k0 + kc], wf[..., k0 : k0 + kc, :]).astype(
                        np.int64
                    )
    elif float64_is_exact(a_max, w_max, k) and biggest < EXACT_LIMIT:
        # every operand, zero point and difference is exact in float64 (below 2^53), and
        # so is every product and partial sum (float64_is_exact)
        af64 = a.astype(np.float64) - float(a_zp)
        wf64 = w.astype(np.float64) - np.asarray(w_zp, dtype=np.float64)
        with _one_blas_thread(a.size * w.shape[-1]):
            acc = np.matmul(af64, wf64).astype(np.int64)
    else:
        return matmul_acc(a, w, a_zp, w_zp, bias)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return acc


__all__ = ["EXACT_LIMIT", "FLOAT32_LIMIT", "float64_is_exact", "float32_chunk", "exact_matmul"]
