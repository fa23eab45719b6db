"""Lifting an accumulator value to a whole input row of the compute op.

Given `var = sum_k (x_k - x_zp) * c_k + bias` with `c_k = w_k - w_zp` and every
`x_k` in `x_type`, find a row hitting a target value. Constructive greedy
first: largest |c_k| first, each `u_k = x_k - x_zp` chosen closest to
`rem / c_k` while keeping the remainder inside what the remaining columns can
still reach (so it never paints itself into a corner by range); untouched
entries stay at the zero point (the simplest input). If the greedy ends with
a non-zero remainder (divisibility), Z3 solves the linear equation.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from .domain import NUMPY
from .errors import LiftError
from .inttypes import int_type
from .lazy import lazy_module
from .matmul import dot, matmul_acc

if TYPE_CHECKING:
    import z3
else:
    z3 = lazy_module("z3")


def row_value(spec, row) -> int:
    """The accumulator produced by `row`, by the kernel's vectorised `matmul.matmul_acc`."""
    a = np.asarray(row, dtype=np.int64).reshape(1, -1)
    w = spec.weights_array.reshape(-1, 1)
    return int(matmul_acc(a, w, spec.x_zp, spec.w_zp, np.array([spec.bias]))[0, 0])


def row_value_dot(spec, row) -> int:
    """The same through the scalar `matmul.dot` (any-domain definition), for cross-checks."""
    return int(dot(NUMPY, [int(x) for x in row], spec.weights, spec.x_zp, spec.w_zp, spec.bias))


def _bounds(spec) -> tuple[int, int]:
    t = int_type(spec.x_type)
    return t.min - spec.x_zp, t.max - spec.x_zp


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _greedy(c_arr: np.ndarray, target: int, lo: int, hi: int) -> list[int] | None:
    """`u` with `sum(c_arr * u) == target`, each entry in [lo, hi] (None where the greedy
    finds none); `c_arr`: the int64 coefficients."""
    k = len(c_arr)
    neg_abs_arr = -np.abs(c_arr)
    by_size = np.argsort(neg_abs_arr, kind="stable")  # |c| descending, ties by position
    c_sorted = c_arr[by_size]
    at_lo, at_hi = c_sorted * lo, c_sorted * hi
    terms = np.zeros((2, k + 1), dtype=np.int64)  # each entry's least and largest term, then 0
    np.minimum(at_lo, at_hi, out=terms[0, :k])
    np.maximum(at_lo, at_hi, out=terms[1, :k])
    # reach_*[pos]: what positions pos.. can still contribute (suffix sums).
    reach_lo, reach_hi = np.cumsum(terms[:, ::-1], axis=1)[:, ::-1].tolist()
    if not reach_lo[0] <= target <= reach_hi[0]:
        return None
    if not lo <= 0 <= hi:
        return None  # the zero point lies outside x_type: leave it to the solver
    u = [0] * k
    order = by_size.tolist()
    coeffs = c_sorted.tolist()  # the loop reads a few of them, as Python ints
    rem = target
    neg_abs = neg_abs_arr[by_size].tolist()  # ascending, for bisect
    pos = 0
    while pos < k and rem != 0:  # once rem == 0 every later entry stays at the zero point
        # Entries with |c| >= 2|rem| would get u = round(rem/c) = 0 (half to even): jump
        # past them when that stays feasible (reachable intervals are nested, so u = 0 is
        # feasible on the whole stretch).
        j = bisect.bisect_right(neg_abs, -2 * abs(rem), pos)
        if j > pos and reach_lo[j] <= rem <= reach_hi[j]:
            pos = j
            continue
        i = order[pos]
        c = coeffs[pos]
        if c != 0:
            # rem - c*u must stay in [reach_lo[pos+1], reach_hi[pos+1]].
            a, b = rem - reach_hi[pos + 1], rem - reach_lo[pos + 1]
            if c > 0:
                ulo, uhi = _ceil_div(a, c), b // c
            else:
                ulo, uhi = _ceil_div(b, c), a // c
            ulo, uhi = max(ulo, lo), min(uhi, hi)
            if ulo > uhi:
                return None
            want = round(rem / c) if abs(rem) < (1 << 52) else rem // c
            u[i] = min(max(want, ulo), uhi)
            rem -= c * u[i]
        pos += 1
    return u if rem == 0 else None


def _solve(coeffs: list[int], target: int, lo: int, hi: int, timeout_s: float) -> list[int] | None:
    # A fresh context per solve: in the global context Z3's model would depend on
    # whatever the process asked Z3 before, and lifted rows must be deterministic.
    ctx = z3.Context()
    s = z3.Solver(ctx=ctx)
    s.set("timeout", int(timeout_s * 1000))
    s.set("random_seed", 0)
    us = [z3.Int(f"u{i}", ctx) for i in range(len(coeffs))]
    for u in us:
        s.add(u >= lo, u <= hi)
    s.add(z3.Sum([c * u for c, u in zip(coeffs, us, strict=True) if c]) == target)
    if s.check() != z3.sat:
        return None
    m = s.model()
    return [m.eval(u, model_completion=True).as_long() for u in us]


def lift_row(spec, value: int, timeout_s: float = 5.0) -> tuple[int, ...]:
    """An input row of `spec.x_type` whose dot product gives `value`; `LiftError` if none."""
    c_arr = spec.weights_array - int(spec.w_zp)
    lo, hi = _bounds(spec)
    target = int(value) - spec.bias
    u = _greedy(c_arr, target, lo, hi)
    if u is None:
        u = _solve(c_arr.tolist(), target, lo, hi, timeout_s)
    if u is None:
        raise LiftError(
            f"no {spec.x_type} input row of length {len(c_arr)} gives {spec.var}={value} "
            "(outside the reachable set, or the solver gave up)"
        )
    row_arr = np.asarray(u, dtype=np.int64) + int(spec.x_zp)
    row = tuple(row_arr.tolist())
    if row_value(spec, row_arr) != int(value):
        raise LiftError(f"internal: lifted row does not reproduce {spec.var}={value}")
    return row
