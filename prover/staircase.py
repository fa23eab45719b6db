"""Monotone step functions as sorted thresholds.

A non-decreasing integer function `f` on an integer interval that takes values
in `[vmin, vmax]` is fully described by the thresholds `t_q = min{x : f(x) >= q}`
for `q = vmin+1 .. vmax`: then `f(x) = vmin + #{q : x >= t_q}`. That form needs
only comparisons, which is what makes float-scale requantization cheap to
encode for a solver (an exact integer reformulation, not an approximation).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .domain import KernelError


def monotone_thresholds(
    f: Callable[[np.ndarray], np.ndarray], vmin: int, vmax: int, lo: int, hi: int
) -> np.ndarray:
    """Thresholds of a non-decreasing `f` on `[lo, hi]` with values in `[vmin, vmax]`.

    `f` takes and returns int64 arrays. A level never reached gets the
    threshold `hi + 1`. Runs a vectorised binary search: about log2(hi-lo)
    evaluations of `f` on `vmax - vmin` points.
    """
    if lo > hi:
        raise KernelError(f"empty interval [{lo}, {hi}]")
    levels = np.arange(vmin + 1, vmax + 1, dtype=np.int64)
    a = np.full(levels.shape, lo, dtype=np.int64)
    b = np.full(levels.shape, hi + 1, dtype=np.int64)
    while True:
        active = a < b
        if not active.any():
            break
        mid = a + (b - a) // 2
        fm = np.asarray(f(np.where(active, mid, lo)), dtype=np.int64)
        up = active & (fm >= levels)
        b = np.where(up, mid, b)
        a = np.where(active & ~up, mid + 1, a)
    return a


def check_monotone_samples(f: Callable[[np.ndarray], np.ndarray], xs: np.ndarray) -> None:
    """Raise if `f` decreases anywhere on the sorted sample points `xs` (a cheap sanity check)."""
    ys = np.asarray(f(np.sort(xs)), dtype=np.int64)
    if np.any(np.diff(ys) < 0):
        raise KernelError("function is not monotone non-decreasing on the sampled points")
