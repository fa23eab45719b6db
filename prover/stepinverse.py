"""Closed-form thresholds of monotone chains: where each step of a staircase starts.

For a non-decreasing primitive `g` and a level `y`, `inverse(y)` is the smallest input
`x` with `g(x) >= y`. For a chain `g_n(...g_1(x))` the thresholds compose exactly:
the smallest `x` with `g_n(...) >= q` is `inv_1(...inv_n(q))`, because each `g_i` is
non-decreasing (`g(u) >= y` iff `u >= inv(y)`).

The formulas mirror the kernel's arithmetic (`requant.py`): integer ceilings for the
fixed-point requantizers (SRDHM rounds `a*b / 2^31` with a nudge: `SRDHM >= y` iff
`a*b >= (2y-1) * 2^30`, for either sign; RoundingDivideByPOT rounds half away from
zero), and for ONNX's float-scale requantizer a float32 search for the smallest float32
accumulator value whose product rounds high enough, then the smallest integer that
float32 conversion maps to it or above. They are guesses to the caller: `segments`
accepts a threshold `t` for level `q` only after checking `f(t-1) < q <= f(t)` on the
chain's concrete evaluation, and searches where the check fails, so a wrong formula
costs time, never a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .staircase import fast_clip

CAP = 1 << 62  # guesses are clipped here (the caller clips to its interval anyway)


def _ceil_div(num: np.ndarray, den: int) -> np.ndarray:
    return -((-num) // den)


def _to_int64(v: np.ndarray) -> np.ndarray:
    if v.dtype == object:
        return np.array([min(max(int(x), -CAP), CAP) for x in v], dtype=np.int64)
    return fast_clip(v, -CAP, CAP).astype(np.int64)


def _exact(y: np.ndarray, extra_bits: int) -> np.ndarray:
    """`y` as int64 when `|y| * 2^extra_bits` stays inside int64, else as Python ints."""
    big = int(np.abs(y).max(initial=0)) if y.size else 0
    if big.bit_length() + extra_bits < 62:
        return y.astype(np.int64)
    return np.array([int(v) for v in y], dtype=object)


def _half_shift(v: np.ndarray, e: int) -> np.ndarray:
    """(2v - 1) * 2^e for e >= 0, as an exact integer array."""
    return (2 * v - 1) * (1 << e)


def inv_single_round(y: np.ndarray, m: int, shift: int) -> np.ndarray:
    """Smallest x with (x*M + 2^(k-1)) >> k >= y, k = 31 - shift (M > 0)."""
    k = 31 - int(shift)
    v = _exact(np.asarray(y), k + 1)
    return _to_int64(_ceil_div(_half_shift(v, k - 1), int(m)))


def _inv_requant_double(y: np.ndarray, p: dict) -> np.ndarray:
    m, s = int(p["multiplier"]), int(p["shift"])
    if m == 0:
        return np.zeros_like(y)
    left, right = max(s, 0), max(-s, 0)
    v = _exact(np.asarray(y) - int(p["zp"]), right + 33)
    # RoundingDivideByPOT(z, r) >= v: z >= (2v-1)*2^(r-1), plus one where that is negative.
    if right:
        z = _half_shift(v, right - 1)
        z = z + (z < 0)
    else:
        z = v
    # SRDHM(x * 2^left, M) >= z  iff  x * 2^left * M >= (2z-1) * 2^30.
    return _to_int64(_ceil_div(_half_shift(z, 30), m << left))


def _inv_requant_single(y: np.ndarray, p: dict) -> np.ndarray:
    m = int(p["multiplier"])
    if m == 0:
        return np.zeros_like(y)
    return inv_single_round(np.asarray(y) - int(p["zp"]), m, int(p["shift"]))


def _round_ok(a32: np.ndarray, s32: np.float32, v: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.rint(a32 * s32) >= v


def _inv_requant_float(y: np.ndarray, p: dict) -> np.ndarray:
    """Smallest int x with rint(float32(x) * s) >= v, mirroring the float32 arithmetic."""
    return inv_float_scale(np.asarray(y, dtype=np.int64) - int(p["zp"]), np.float32(p["scale"]))


def inv_float_scale(v: np.ndarray, s32: Any) -> np.ndarray:
    """Smallest int x with rint(float32(x) * s32) >= v (`s32` float32, scalar or per level)."""
    s32 = np.asarray(s32, dtype=np.float32)
    v = np.asarray(v, dtype=np.int64).astype(np.float64)
    with np.errstate(all="ignore"):
        a = ((v - 0.5) / s32.astype(np.float64)).astype(np.float32)
    # The smallest float32 a with rint(a * s) >= v: move from the estimate by ulps.
    for _ in range(8):
        ok = _round_ok(a, s32, v)
        prev = np.nextafter(a, np.float32(-np.inf))
        down = ok & _round_ok(prev, s32, v)
        if not (~ok).any() and not down.any():
            break
        a = np.where(~ok, np.nextafter(a, np.float32(np.inf)), np.where(down, prev, a))
    a64 = a.astype(np.float64)
    # The smallest integer whose float32 rounding (nearest, ties to even) is >= a.
    pred = np.nextafter(a, np.float32(-np.inf)).astype(np.float64)
    mid = (pred + a64) / 2
    even = (a.view(np.uint32) & 1) == 0
    tie = np.where(even, mid, mid + 1)
    big = np.where(np.floor(mid) == mid, tie, np.ceil(mid))
    x = np.where(np.abs(a64) <= float(1 << 24), np.ceil(a64), big)
    x = np.nan_to_num(x, nan=0.0, posinf=CAP, neginf=-CAP)
    return fast_clip(x, -CAP, CAP).astype(np.int64)


def _inv_mul(y: np.ndarray, p: dict) -> np.ndarray:
    c = int(p["c"])
    return _ceil_div(fast_clip(y, -CAP, CAP), c) if c > 0 else np.zeros_like(y)


Inverse = Callable[[np.ndarray, dict], np.ndarray]

# The smallest input reaching each level, per monotone primitive (levels outside a
# clamp's range give guesses the caller's clip and check sort out).
INVERSE: dict[str, Inverse] = {
    "add_const": lambda y, p: fast_clip(y, -CAP, CAP) - int(p["c"]),
    "mul_const": _inv_mul,
    "floordiv_const": lambda y, p: (
        fast_clip(y, -CAP // int(p["c"]), CAP // int(p["c"])) * int(p["c"])
    ),
    "clip": lambda y, p: y,
    "saturate": lambda y, p: y,
    "requant_double": _inv_requant_double,
    "requant_single": _inv_requant_single,
    "requant_float": _inv_requant_float,
}


def chain_guess(chain: Sequence[Any], levels: np.ndarray) -> np.ndarray | None:
    """Closed-form thresholds of the chain (ops innermost first) for `levels`; None if unknown."""
    y = fast_clip(np.asarray(levels, dtype=np.int64), -CAP, CAP)
    for o in reversed(chain):
        inv = INVERSE.get(o.prim)
        if inv is None:
            return None
        y = fast_clip(inv(y, o.kwargs), -CAP, CAP).astype(np.int64, copy=False)
    return y
