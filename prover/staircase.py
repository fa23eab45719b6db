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


def fast_clip(x, lo, hi) -> np.ndarray:
    """np.clip with int bounds (made int64), without its per-call dtype-limit lookups."""
    return np.minimum(np.maximum(x, np.int64(lo)), np.int64(hi))


def monotone_thresholds(
    f: Callable[[np.ndarray], np.ndarray], vmin: int, vmax: int, lo: int, hi: int
) -> np.ndarray:
    """Thresholds of a non-decreasing `f` on `[lo, hi]` with values in `[vmin, vmax]`.

    `f` takes and returns int64 arrays. A level never reached gets the
    threshold `hi + 1`. Runs a vectorised binary search: about log2(hi-lo)
    evaluations of `f` on `vmax - vmin` points (`first_at_least` without guesses).
    """
    return first_at_least(f, np.arange(vmin + 1, vmax + 1, dtype=np.int64), lo, hi)


def first_at_least(
    f: Callable[[np.ndarray], np.ndarray],
    levels: np.ndarray,
    lo: int,
    hi: int,
    guess: np.ndarray | None = None,
) -> np.ndarray:
    """Per level q: the smallest x in `[lo, hi]` with `f(x) >= q` (`hi + 1` if none).

    `f` is non-decreasing on `[lo, hi]`. A guess `t` is accepted exactly when
    `f(t-1) < q <= f(t)` (with `f(lo-1) = -inf`, `f(hi+1) = +inf`), which by
    monotonicity makes it the answer; a rejected guess tells the side, and the
    answer is then found by galloping away from it and a binary search inside the
    bracket. Without guesses this is a plain vectorised binary search. Only the
    still-open levels are evaluated in each round.
    """
    if lo > hi:
        raise KernelError(f"empty interval [{lo}, {hi}]")
    levels = np.asarray(levels, dtype=np.int64)
    n = levels.size
    if guess is not None and n:
        g = fast_clip(np.asarray(guess, dtype=np.int64), lo, hi + 1)
        pts = fast_clip(np.concatenate([g - 1, g]), lo, hi)
        fv = np.asarray(f(pts), dtype=np.int64)
        below = (g == lo) | (fv[:n] < levels)  # f(g-1) < q
        above = (g == hi + 1) | (fv[n:] >= levels)  # f(g) >= q
        hit = below & above
        if hit.all():  # every guess is its level's answer (the common case): nothing to search
            return g
        a, b = _whole(n, lo, hi)
        a[hit] = b[hit] = g[hit]
        right = ~above  # f(g) < q: the answer is above g
        left = above & ~below  # f(g-1) >= q: the answer is below g
        a[right] = g[right] + 1
        b[left] = g[left] - 1
        _gallop(f, levels, a, b, g, right, left, lo, hi)
    else:
        a, b = _whole(n, lo, hi)
    _bisect(f, levels, a, b)
    return a


def _whole(n: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Each of `n` answers' bounds [a, b] before any evaluation: the answer lies in
    [lo, hi + 1] (hi + 1: no point reaches the level)."""
    return np.full(n, lo, dtype=np.int64), np.full(n, hi + 1, dtype=np.int64)


def _gallop(f, levels, a, b, g, right, left, lo: int, hi: int) -> None:
    """Narrow the brackets of rejected guesses by probing at growing distances from them."""
    step = 2
    idx = np.flatnonzero(right | left)
    while idx.size and step < (1 << 62) // 16:
        up = right[idx]
        probe = np.where(up, g[idx] + step, g[idx] - 1 - step)
        inside = (probe >= lo) & (probe <= hi)
        idx, up, probe = idx[inside], up[inside], probe[inside]
        if not idx.size:
            return
        ge = np.asarray(f(probe), dtype=np.int64) >= levels[idx]
        # Going up: f(probe) >= q closes the bracket at probe; else the answer is above it.
        # Going down: f(probe) < q closes it at probe + 1; else the answer is at most probe.
        b[idx[up & ge]] = probe[up & ge]
        a[idx[up & ~ge]] = probe[up & ~ge] + 1
        a[idx[~up & ~ge]] = probe[~up & ~ge] + 1
        b[idx[~up & ge]] = probe[~up & ge]
        idx = idx[(up & ~ge) | (~up & ge)]
        step *= 16


def _bisect(f, levels, a, b) -> None:
    while True:
        idx = np.flatnonzero(a < b)
        if not idx.size:
            return
        mid = a[idx] + (b[idx] - a[idx]) // 2
        up = np.asarray(f(mid), dtype=np.int64) >= levels[idx]
        b[idx[up]] = mid[up]
        a[idx[~up]] = mid[~up] + 1
