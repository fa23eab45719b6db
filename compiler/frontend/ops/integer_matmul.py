"""What the integer matmul converters (QLinearMatMul, MatMulInteger, QGemm, pointwise
QLinearConv) share: weights, per-column parameters, ONNX Runtime's requantization scales,
the int32 accumulator check, and the one IR `matmul` node they all emit."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from compiler.ir.graph import Node, Value
from prover.inttypes import int_type
from prover.matmul import AccRange, accumulator_range
from prover.requant import onnx_requant_scale

from ..context import BuildContext
from ..elem_types import EIGHT_BIT, ORT_QLINEAR_TYPES


def narrow_weights(w: Any) -> np.ndarray:
    """`w` in the narrowest of int16, int32 and int64 that holds it, read-only: the IR keeps
    every weight of the model, and as int64 they were 8x the model's 8-bit weights (89 MB
    of resnet18's peak). Every kernel takes weights as int64 (`np.asarray(w, np.int64)`)
    before computing with them, so a narrow array never overflows an arithmetic step."""
    a = np.asarray(w)
    if a.dtype.kind not in "iu":
        raise TypeError(f"integer weights expected, got {a.dtype}")
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    for t in (np.int16, np.int32, np.int64):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            out = np.ascontiguousarray(a, dtype=t)
            out.setflags(write=False)
            return out
    raise ValueError(f"weights outside int64: [{lo}, {hi}]")


def emit_matmul(
    ctx: BuildContext,
    n: onnx.NodeProto,
    a: str,
    out: Value,
    *,
    w,
    a_zp,
    w_zp,
    a_type: str,
    bias,
    requant: dict | None,
    kind: str = "MatMul",
    **extra: Any,
) -> Node:
    """An integer matmul node (the one IR form of QLinearMatMul, MatMulInteger, QLinearConv).

    `acc_range` (a `prover.matmul.AccRange`) is the exact per-column accumulator range
    `check_acc` computed for these weights, zero points and bias. `a_zp_input` (in
    `extra`): a zero point computed at run time, the node's second input (`a_zp` is then 0).
    """
    r = ctx.acc_ranges.pop(id(n))  # every handler calls check_acc(n, ...) first
    zp_in = extra.get("a_zp_input")
    w = narrow_weights(w)
    return ctx.emit(
        "matmul",
        [n],
        [a] if zp_in is None else [a, zp_in],
        out,
        kind=kind,
        **extra,
        acc_range=r,
        w=w,
        a_zp=a_zp,
        w_zp=w_zp,
        a_type=a_type,
        w_type=ctx.w_dtype,
        bias=bias,
        requant=requant,
    )


def run_time_zp(ctx: BuildContext, n: onnx.NodeProto, idx: int, a_type: str) -> str | None:
    """The name of input `idx` when it is a zero point computed at run time (dynamic
    quantization's DynamicQuantizeLinear): one element of the activation's type; None when
    it is absent or a constant (then `scalar` reads it)."""
    name = n.input[idx] if idx < len(n.input) else ""
    if not name or name in ctx.consts or name in ctx.overridable:
        return None
    v = ctx.value(n, name)
    if v.dtype != a_type or int(np.prod(v.shape)) != 1:
        raise ctx.fail(
            n, f"zero point '{name}' is {v.dtype}{list(v.shape)}; the NPU reads one {a_type}"
        )
    return name


def weights(ctx: BuildContext, n: onnx.NodeProto, idx: int) -> np.ndarray:
    """Constant 2-D 8-bit weights [K, N], 8-bit as read (their type kept for `emit_matmul`,
    which stores them narrow; every kernel widens them to int64 before computing)."""
    w = ctx.const(n, idx, "weights")
    if w.dtype.name not in EIGHT_BIT:
        raise ctx.fail(n, f"weights have type {w.dtype.name}; supported: int8, uint8")
    if w.ndim != 2:
        raise ctx.fail(n, f"weights must be 2-D [K, N], got shape {list(w.shape)}")
    ctx.w_dtype = w.dtype.name
    return w


def column_param(
    ctx: BuildContext, n: onnx.NodeProto, idx: int, what: str, N: int, default: Any = None
) -> Any:
    """A per-tensor (scalar) or per-column ([N], as a tuple) constant input; `default` if
    absent (then it is optional)."""
    v = ctx.const(n, idx, what, optional=default is not None)
    if v is None:
        return default
    if v.size == 1:
        return v.reshape(()).item()
    if v.shape != (N,):
        raise ctx.fail(n, f"{what} must be a scalar or have shape [{N}], got {list(v.shape)}")
    return tuple(v.tolist())


def matmul_out(ctx: BuildContext, n: onnx.NodeProto, a: Value, w: np.ndarray, dtype: str) -> Value:
    """The output value of `a` [..., K] times `w` [K, N]: [..., N] of `dtype`."""
    if len(a.shape) < 2 or a.shape[-1] != w.shape[0]:
        raise ctx.fail(n, f"input shape {list(a.shape)} does not match weights {list(w.shape)}")
    return Value(n.output[0], dtype, a.shape[:-1] + (w.shape[1],))


def check_acc(ctx: BuildContext, n, w, w_zp, a_type, a_zp, bias=None) -> None:
    """Bad input unless the accumulator stays in int32; the exact per-column range is
    kept for the node's `acc_range` attribute (computed once, read by every pass).

    `a_zp` None: a zero point computed at run time, any value of `a_type`; the range is
    the union of the ranges at its two ends (per column the accumulator is linear in the
    zero point for each input, so its extremes over both are at an end of each)."""
    t = int_type(a_type)
    wz = np.asarray(w_zp, dtype=np.int64)
    ends = [
        accumulator_range(w, wz, t, int(z), bias)
        for z in ((t.min, t.max) if a_zp is None else (a_zp,))
    ]
    r = ends[0]
    if len(ends) > 1:
        r = AccRange(
            tuple(min(v) for v in zip(*(e.lo for e in ends), strict=True)),
            tuple(max(v) for v in zip(*(e.hi for e in ends), strict=True)),
        )
    ctx.acc_ranges[id(n)] = r
    if not r.fits():
        raise ctx.fail(
            n, f"accumulator range {list(r.overall)} may leave int32 (ONNX Runtime would wrap)"
        )


def out_type(ctx: BuildContext, n: onnx.NodeProto, zp: np.ndarray) -> str:
    """The output type a zero point gives (int8 or uint8 only)."""
    t = zp.dtype.name
    if t not in EIGHT_BIT:
        raise ctx.fail(n, f"output type {t} not supported; supported: int8, uint8")
    return t


def ort_kernel_types(ctx: BuildContext, n: onnx.NodeProto, b_idx: int, y_zp_idx: int) -> None:
    """Bad input unless ONNX Runtime has a kernel for the node's (a, b, y) types.

    y's type is y_zero_point's; without one (QGemm) it is a's, or float.
    """
    names = [n.input[i] if i < len(n.input) else "" for i in (0, b_idx, y_zp_idx)]
    a_t, b_t, y_t = (ctx.elem_type(x) if x else None for x in names)
    if a_t is None or b_t is None:
        return  # a missing or unknown input is reported by the handler
    if not names[2]:
        y_t = a_t
    if (a_t, b_t, y_t) not in ORT_QLINEAR_TYPES:
        known = ", ".join(f"({a}, {b}, {y})" for a, b, y in ORT_QLINEAR_TYPES)
        raise ctx.bad(
            n,
            f"ONNX Runtime has no {n.op_type} kernel for types (a, b, y) = "
            f"({a_t}, {b_t}, {y_t}); it has {known}",
        )


def qlinear_quant(
    ctx: BuildContext, n: onnx.NodeProto, N: int, names: tuple[str, str], y_zp_msg: str
):
    """Inputs 1, 2 and 4-7 of a QLinearMatMul / QLinearConv (`names`: the a and b
    inputs' prefixes): (a_scale, a_zp, b scale per column, b zero point(s), y_scale,
    y_zero_point array), float32 scales and a scalar y_zero_point checked."""
    a, b = names
    ctx.float32_scales(n, {1: f"{a}_scale", 4: f"{b}_scale", 6: "y_scale"})
    a_scale = ctx.scalar(n, 1, f"{a}_scale")
    a_zp = int(ctx.scalar(n, 2, f"{a}_zero_point"))
    b_scale = column_param(ctx, n, 4, f"{b}_scale", N)
    w_zp = column_param(ctx, n, 5, f"{b}_zero_point", N)
    y_scale = ctx.scalar(n, 6, "y_scale")
    y_zp_arr = ctx.const(n, 7, "y_zero_point")
    if y_zp_arr.size != 1:
        raise ctx.fail(n, y_zp_msg)
    bs = b_scale if isinstance(b_scale, tuple) else (b_scale,) * N
    return a_scale, a_zp, bs, w_zp, y_scale, y_zp_arr


def requant_scales(ctx: BuildContext, n, a_scale, b_scales, y_scale) -> tuple[float, ...]:
    """ONNX Runtime's float32 requantization scale per output column, all finite and > 0
    (`onnx_requant_scale` on every column's weight scale at once)."""
    for what, v in (("input scale", a_scale), ("output scale", y_scale)):
        f = float(np.float32(v))
        if not (np.isfinite(f) and f > 0):
            raise ctx.bad(n, f"{what} {v} must be finite and positive")
    with np.errstate(all="ignore"):
        b = np.asarray(b_scales, dtype=np.float64).astype(np.float32)
        bad = ~(np.isfinite(b) & (b > 0))
        if bad.any():
            raise ctx.bad(
                n, f"weight scale {b_scales[int(np.argmax(bad))]} must be finite and positive"
            )
        q = np.asarray(onnx_requant_scale(a_scale, b, y_scale))
    if not (np.isfinite(q) & (q > 0)).all():
        raise ctx.bad(n, "requantization scale a_scale*b_scale/y_scale must be finite and positive")
    return tuple(q.astype(np.float64).tolist())
