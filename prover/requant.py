"""Requantization: int32 accumulator to a narrow integer type.

Three schemes, each a kernel primitive over a `Domain`:

- `requant_double`: gemmlowp / TFLite double rounding,
  `MultiplyByQuantizedMultiplier(x, M, s)` = RDBPOT(SRDHM(x * 2^max(s,0), M), max(-s,0));
- `requant_single`: TFLite single rounding, `(x*M + 2^(30-s)) >> (31-s)` in int64;
- `requant_float`: ONNX Runtime's float-scale form (QLinearMatMul),
  `saturate(round_half_even(float32(acc) * s) + zp)` with float32 arithmetic.

Then `+ zero_point` and saturation to the output type.

The symbolic form of `requant_float` is an exact integer reformulation: the map
`acc -> round_half_even(float32(float32(acc) * s))` is non-decreasing for `s > 0`
(IEEE round-to-nearest conversion, multiplication by a positive number and
rounding are each monotone), so it equals a staircase whose thresholds are
found by binary search on the concrete float32 evaluation (see `staircase.py`).
That keeps floating point out of the solver; tests check the staircase against
the direct float evaluation on every threshold and its neighbours.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from .domain import NUMPY, Domain, KernelError, NumpyDomain
from .inttypes import INT32_MAX, INT32_MIN, IntType, saturate
from .staircase import monotone_thresholds

# --- parameter validation -------------------------------------------------------------


def check_multiplier(multiplier: int, shift: int, *, single_rounding: bool = False) -> None:
    """Raise `KernelError` unless (multiplier, shift) is a valid fixed-point scale."""
    if not isinstance(multiplier, int | np.integer) or not isinstance(shift, int | np.integer):
        raise KernelError("multiplier and shift must be integers")
    if not 0 <= multiplier <= INT32_MAX:
        raise KernelError(
            f"multiplier {multiplier} does not fit int32 (must be in [0, 2^31-1]); "
            "a quantiser that rounds the mantissa up to 2^31 must halve it and add 1 to the shift"
        )
    hi = 30 if single_rounding else 31
    if not -31 <= shift <= hi:
        raise KernelError(f"shift {shift} out of range [-31, {hi}]")


# --- gemmlowp / TFLite double rounding --------------------------------------------------


def srdhm(d: Domain, a: Any, b: Any) -> Any:
    """SaturatingRoundingDoublingHighMul of two int32 values (exact, in int64)."""
    ab = a * b
    nudge = d.where(ab >= 0, d.const(1 << 30), d.const(1 - (1 << 30)))
    res = d.tdiv_pow2(ab + nudge, 31)
    overflow = d.land(a == INT32_MIN, b == INT32_MIN)
    return d.where(overflow, d.const(INT32_MAX), res)


def rdbpot(d: Domain, x: Any, exponent: int) -> Any:
    """RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    if not 0 <= exponent <= 31:
        raise KernelError(f"RoundingDivideByPOT exponent {exponent} out of range [0, 31]")
    mask = (1 << exponent) - 1
    rem = d.band(x, mask)
    thr = d.const(mask >> 1) + d.where(x < 0, d.const(1), d.const(0))
    return d.shr(x, exponent) + d.where(rem > thr, d.const(1), d.const(0))


def mbqm(d: Domain, x: Any, multiplier: int, shift: int) -> Any:
    """MultiplyByQuantizedMultiplier (double rounding). See `mbqm_precondition`."""
    check_multiplier(multiplier, shift)
    left = max(shift, 0)
    right = max(-shift, 0)
    if type(x) is np.ndarray and x.dtype == np.int64 and x.ndim and isinstance(d, NumpyDomain):
        return _mbqm_int64(x, int(multiplier), left, right)
    return rdbpot(d, srdhm(d, x * (1 << left), d.const(multiplier)), right)


_I64 = np.int64


def _mbqm_int64(x: np.ndarray, multiplier: int, left: int, right: int) -> np.ndarray:
    """`rdbpot(srdhm(x * 2^left, M), right)` on an int64 array, in fewer array passes.

    The same int64 arithmetic, wrap-around included, element for element (a test compares
    it with the composition on int64's extremes): SRDHM's saturating case needs both
    operands at INT32_MIN, and a valid multiplier (`check_multiplier`) is >= 0, so it never
    applies; the truncating division is SRDHM's own (`NumpyDomain.tdiv_pow2`); RDBPOT by 0
    is the identity.
    """
    a = x << _I64(left) if left else x  # x * 2^left, wrapping alike
    ab = a * _I64(multiplier)
    res = NUMPY.tdiv_pow2(ab + np.where(ab >= 0, _I64(1 << 30), _I64(1 - (1 << 30))), 31)
    if not right:
        return res
    mask = (1 << right) - 1
    up = (res & _I64(mask)) > (_I64(mask >> 1) + (res < 0))
    return (res >> _I64(right)) + up


def mbqm_precondition(d: Domain, x: Any, shift: int) -> Any:
    """Where `x * 2^max(shift,0)` fits int32 (C leaves the overflow undefined).

    An obligation on the implementation (NPU) side, assumed only on the reference
    side, where the C reference itself has no value (see `primitives`).
    Written as bounds on `x` itself: forming `x * 2^left` could wrap the 64-bit
    symbolic word for a huge `x` and make the check pass.
    """
    left = max(shift, 0)
    return d.land(x >= (INT32_MIN >> left), x <= (INT32_MAX >> left))


# --- TFLite single rounding -------------------------------------------------------------


def single_round(d: Domain, x: Any, multiplier: int, shift: int) -> Any:
    """TFLite single rounding: (x*M + 2^(30-s)) >> (31-s), computed in int64."""
    check_multiplier(multiplier, shift, single_rounding=True)
    total = 31 - shift
    return d.shr(x * multiplier + (1 << (total - 1)), total)


def single_round_precondition(d: Domain, x: Any, multiplier: int, shift: int) -> Any:
    """Where `x` is an int32 and the single-rounding result fits int32 (TFLite DCHECKs it).

    An obligation on the implementation side, assumed only on the reference side.

    For an int32 `x` the int64 product cannot wrap, so the result check is exact.
    """
    r = single_round(d, x, multiplier, shift)
    in_range = d.land(x >= INT32_MIN, x <= INT32_MAX)
    return d.land(in_range, d.land(r >= INT32_MIN, r <= INT32_MAX))


def int32_precondition(d: Domain, x: Any) -> Any:
    """Where `x` is an int32 (the accumulator type every requantizer is defined on).

    An obligation on the implementation side (an int32 accumulator register), assumed
    only on the reference side (ONNX gives an overflowing int32 sum no value).
    """
    return d.land(x >= INT32_MIN, x <= INT32_MAX)


# --- composite requantizers -------------------------------------------------------------


def requant_double(d: Domain, acc: Any, multiplier: int, shift: int, zp: int, out: IntType) -> Any:
    """saturate(MBQM(acc, M, s) + zp) into `out` (gemmlowp/TFLite double rounding)."""
    _check_zp(zp, out)
    return saturate(d, mbqm(d, acc, multiplier, shift) + zp, out)


def requant_single(d: Domain, acc: Any, multiplier: int, shift: int, zp: int, out: IntType) -> Any:
    """saturate(single_round(acc, M, s) + zp) into `out` (TFLite single rounding)."""
    _check_zp(zp, out)
    return saturate(d, single_round(d, acc, multiplier, shift) + zp, out)


def requant_float_concrete(acc: Any, scale: Any, zp: Any, out: IntType) -> np.ndarray:
    """ONNX Runtime's requantization, evaluated in float32 exactly as ONNX Runtime does.

    `scale` and `zp` may be arrays broadcasting against `acc` (per-channel).
    """
    acc32 = np.asarray(acc, dtype=np.int64).astype(np.float32)
    # a huge scale overflows the float32 product to +-inf as in ONNX Runtime: rint keeps
    # it and the clip saturates it, so the overflow is the intended IEEE result
    with np.errstate(over="ignore"):
        y = acc32 * np.asarray(scale, dtype=np.float32)
    r = np.rint(y).astype(np.float64) + np.asarray(zp, dtype=np.float64)
    return np.clip(r, out.min, out.max).astype(np.int64)


def requant_float(d: Domain, acc: Any, scale: float, zp: int, out: IntType) -> Any:
    """saturate(round_half_even(float32(acc) * float32(scale)) + zp) for int32 `acc`.

    The numpy domain evaluates the float32 formula directly; every domain can
    also use `requant_float_steps` (the exact staircase form).
    """
    _check_scale(scale)
    _check_zp(zp, out)
    if isinstance(d, NumpyDomain):
        return requant_float_concrete(acc, np.float32(scale), zp, out)
    return requant_float_steps(d, acc, scale, zp, out)


def requant_float_steps(d: Domain, acc: Any, scale: float, zp: int, out: IntType) -> Any:
    """The staircase (integer-only) form of `requant_float`, valid for int32 `acc`."""
    t = float_requant_thresholds(float(np.float32(scale)), int(zp), out.name)
    return d.const(out.min) + d.step_count(acc, t)


@lru_cache(maxsize=4096)
def _thresholds_cached(scale: float, zp: int, out_name: str) -> tuple[int, ...]:
    from .inttypes import int_type

    out = int_type(out_name)
    s32 = np.float32(scale)
    t = monotone_thresholds(
        lambda a: requant_float_concrete(a, s32, zp, out), out.min, out.max, INT32_MIN, INT32_MAX
    )
    return tuple(int(v) for v in t)


def float_requant_thresholds(scale: float, zp: int, out_name: str) -> tuple[int, ...]:
    """Thresholds t_q (q = out.min+1 .. out.max) of ONNX Runtime's float requantization."""
    from .inttypes import int_type

    _check_scale(scale)
    out = int_type(out_name)
    if out.bits > 16:
        raise KernelError(
            f"the staircase form of float requantization to {out.name} would need "
            f"{out.size - 1} thresholds; use an output type of at most 16 bits"
        )
    _check_zp(zp, out)
    return _thresholds_cached(float(np.float32(scale)), int(zp), out_name)


def onnx_requant_scale(a_scale: float, b_scale: Any, y_scale: float) -> Any:
    """The float32 scale ONNX Runtime's QLinearMatMul uses: (a_scale*b_scale)/y_scale (an
    array of them for an array `b_scale`: the same float32 operations per element)."""
    return np.float32(np.float32(np.float32(a_scale) * np.float32(b_scale)) / np.float32(y_scale))


# --- real scale to (multiplier, shift) --------------------------------------------------


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: real = M * 2^(shift-31), M in [2^30, 2^31-1].

    Handles the edge case where the rounded mantissa reaches 2^31 (it is halved
    and the shift incremented) and flushes scales below 2^-32 to (0, 0).
    """
    if not math.isfinite(real) or real < 0:
        raise KernelError(f"scale {real} must be finite and non-negative")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = math.floor(q * (1 << 31) + 0.5)  # round half away from zero (q > 0)
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        raise KernelError(f"scale {real} too large for a fixed-point multiplier (shift {shift})")
    return int(q_fixed), int(shift)


def quantize_multiplier_unfixed(real: float) -> tuple[int, int]:
    """The known-defective quantiser that forgets the 2^31 case (kept for regression tests)."""
    q, shift = math.frexp(real)
    return int(math.floor(q * (1 << 31) + 0.5)), int(shift)


# --- helpers ----------------------------------------------------------------------------


def _check_zp(zp: int, out: IntType) -> None:
    if not out.contains(int(zp)):
        raise KernelError(f"zero point {zp} outside the range of {out.name}")


def _check_scale(scale: float) -> None:
    s = float(np.float32(scale))
    if not math.isfinite(s) or s <= 0.0:
        raise KernelError(f"requantization scale {scale} must be finite and positive in float32")
