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

import numpy as np
import z3

from .domain import NUMPY
from .errors import LiftError
from .inttypes import int_type
from .matmul import dot


def row_value(spec, row) -> int:
    """The accumulator produced by `row` (the kernel's `matmul.dot`, concretely)."""
    return int(
        dot(NUMPY, [np.int64(x) for x in row], spec.weights, spec.x_zp, spec.w_zp, spec.bias)
    )


def _bounds(spec) -> tuple[int, int]:
    t = int_type(spec.x_type)
    return t.min - spec.x_zp, t.max - spec.x_zp


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _greedy(coeffs: list[int], target: int, lo: int, hi: int) -> list[int] | None:
    k = len(coeffs)
    order = sorted(range(k), key=lambda i: (-abs(coeffs[i]), i))
    reach_lo = [0] * (k + 1)
    reach_hi = [0] * (k + 1)
    for pos in range(k - 1, -1, -1):
        c = coeffs[order[pos]]
        reach_lo[pos] = reach_lo[pos + 1] + min(c * lo, c * hi)
        reach_hi[pos] = reach_hi[pos + 1] + max(c * lo, c * hi)
    if not reach_lo[0] <= target <= reach_hi[0]:
        return None
    u = [0] * k
    rem = target
    for pos, i in enumerate(order):
        c = coeffs[i]
        if c == 0:
            continue
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
    return u if rem == 0 else None


def _solve(coeffs: list[int], target: int, lo: int, hi: int, timeout_s: float) -> list[int] | None:
    s = z3.Solver()
    s.set("timeout", int(timeout_s * 1000))
    us = [z3.Int(f"u{i}") for i in range(len(coeffs))]
    for u in us:
        s.add(u >= lo, u <= hi)
    s.add(z3.Sum([c * u for c, u in zip(coeffs, us, strict=True) if c]) == target)
    if s.check() != z3.sat:
        return None
    m = s.model()
    return [m.eval(u, model_completion=True).as_long() for u in us]


def lift_row(spec, value: int, timeout_s: float = 5.0) -> tuple[int, ...]:
    """An input row of `spec.x_type` whose dot product gives `value`; `LiftError` if none."""
    coeffs = [w - spec.w_zp for w in spec.weights]
    lo, hi = _bounds(spec)
    target = int(value) - spec.bias
    u = _greedy(coeffs, target, lo, hi)
    if u is None:
        u = _solve(coeffs, target, lo, hi, timeout_s)
    if u is None:
        raise LiftError(
            f"no {spec.x_type} input row of length {len(coeffs)} gives {spec.var}={value} "
            "(outside the reachable set, or the solver gave up)"
        )
    row = tuple(x + spec.x_zp for x in u)
    if row_value(spec, row) != int(value):
        raise LiftError(f"internal: lifted row does not reproduce {spec.var}={value}")
    return row
