"""Concrete ONNX QuantizeLinear / DequantizeLinear, exactly as ONNX Runtime computes them.

ONNX Runtime (MLAS) quantizes with a float32 division, then saturates, rounds
half to even and adds the zero point:

    q = saturate(round_half_even(float32(x) / float32(scale)) + zp)

and dequantizes with an int32 subtraction, a conversion to float32 and a float32
multiply:

    x = float32(int32(q) - int32(zp)) * float32(scale)

Per-axis scales and zero points are 1-D arrays applied along `axis`. NaN inputs
are rejected (ONNX Runtime's result for them is platform-specific).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .domain import KernelError
from .inttypes import INT32, IntType, int_type


def _as_type(t: IntType | str) -> IntType:
    return t if isinstance(t, IntType) else int_type(t)


def _per_axis(v: Any, shape: tuple, axis: int | None, what: str, dtype: Any) -> np.ndarray:
    """`v` (scalar or 1-D) shaped to broadcast along `axis` of a tensor of `shape`."""
    ndim = len(shape)
    a = np.asarray(v, dtype=dtype)
    if a.ndim == 0 or (a.ndim == 1 and a.shape[0] == 1 and axis is None):
        return a.reshape(())
    if a.ndim != 1:
        raise KernelError(f"{what} must be a scalar or a 1-D tensor, got shape {a.shape}")
    if axis is None:
        raise KernelError(f"a 1-D {what} of length {a.shape[0]} needs an axis")
    if not -ndim <= axis < ndim:
        raise KernelError(f"axis {axis} out of range for a {ndim}-D tensor")
    if a.shape[0] != shape[axis % ndim]:
        raise KernelError(
            f"{what} has {a.shape[0]} entries; axis {axis} of the tensor has {shape[axis % ndim]}"
        )
    bshape = [1] * ndim
    bshape[axis % ndim] = a.shape[0]
    return a.reshape(bshape)


def _check_scales(scale: np.ndarray) -> None:
    if scale.size == 0 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise KernelError(f"quantization scale {scale.tolist()} must be finite and positive")


def _check_zps(zp: np.ndarray, t: IntType) -> None:
    if zp.size and (zp.min() < t.min or zp.max() > t.max):
        raise KernelError(f"zero point {zp.tolist()} outside the range of {t.name}")


def quantize_linear(
    x: Any, scale: Any, zp: Any, out_type: IntType | str, axis: int | None = None
) -> np.ndarray:
    """ONNX Runtime's QuantizeLinear on float32 `x` (int64 result holding `out_type` values)."""
    t = _as_type(out_type)
    x32 = np.asarray(x, dtype=np.float32)
    if np.any(np.isnan(x32)):
        raise KernelError("QuantizeLinear input contains NaN")
    s = _per_axis(scale, x32.shape, axis, "scale", np.float32)
    z = _per_axis(zp, x32.shape, axis, "zero point", np.int64)
    _check_scales(s)
    _check_zps(z, t)
    with np.errstate(over="ignore"):
        y = x32 / s
    # Clamping before rounding keeps huge values (and inf) exact; the bounds are integers,
    # so it is the same as saturating after adding the zero point.
    lo = (t.min - z).astype(np.float64)
    hi = (t.max - z).astype(np.float64)
    r = np.clip(y.astype(np.float64), lo, hi)
    return (np.rint(r).astype(np.int64) + z).astype(np.int64)


def dequantize_linear(q: Any, scale: Any, zp: Any = 0, axis: int | None = None) -> np.ndarray:
    """ONNX Runtime's DequantizeLinear: float32(int32(q) - zp) * float32(scale)."""
    q64 = np.asarray(q, dtype=np.int64)
    s = _per_axis(scale, q64.shape, axis, "scale", np.float32)
    z = _per_axis(zp, q64.shape, axis, "zero point", np.int64)
    _check_scales(s)
    diff = q64 - z
    if diff.size and (diff.min() < INT32.min or diff.max() > INT32.max):
        raise KernelError("DequantizeLinear: q - zero_point leaves int32")
    return (diff.astype(np.float32) * s).astype(np.float32)
