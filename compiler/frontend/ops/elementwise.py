"""Elementwise ops: com.microsoft QLinearSigmoid / QLinearLeakyRelu (one `lut` table each),
integer Clip (`clip`), and com.microsoft QLinearAdd / QLinearMul with one constant operand
(`qlinear_binary`, exact MLAS) or two activations (`eltwise`, `prover.eltwise`). `lut` is also the table the QDQ activation groups emit.

Versions read: Clip 6..10 (min/max attributes, float only: run on the host as written) and
11+ (min/max inputs; 12 adds integer types, read here); com.microsoft ops 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from compiler.errors import FrontendError
from compiler.ir.graph import Value
from compiler.ort.tables import QLINEAR_FUNCTIONS, TableSpec, reference_table
from prover.domain import KernelError
from prover.inttypes import int_tuple, int_type
from prover.qlinear_binary import QLinearBinaryParams, span_mode

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from ..registry import MS_DOMAIN, converter
from .host import float_op

converter("", "Clip", since=6, until=10)(float_op)


@converter(MS_DOMAIN, "QLinearSigmoid", since=1, attributes=(), host_fallback=True)
@converter(MS_DOMAIN, "QLinearLeakyRelu", since=1, attributes=("alpha",), host_fallback=True)
def qlinear_activation(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """com.microsoft QLinearSigmoid / QLinearLeakyRelu: one `lut` table (`lut`)."""
    attrs = ctx.attrs(n)
    it = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    x = ctx.value(n, n.input[0])
    xs = float(ctx.scale(n, 1, "X_scale")[0])
    xz = int(ctx.scalar(n, 2, "X_zero_point", default=0))
    ys = float(ctx.scale(n, 3, "Y_scale")[0])
    yz = int(ctx.scalar(n, 4, "Y_zero_point", default=0))
    for idx, what in ((2, "X_zero_point"), (4, "Y_zero_point")):
        z = ctx.const(n, idx, what, optional=True)
        if z is not None and z.dtype.name != it:
            raise ctx.fail(n, f"{what} has type {z.dtype.name}; the input is {it}")
    alpha = attrs.get("alpha")
    if n.op_type == "QLinearLeakyRelu" and alpha is None:
        alpha = 0.01
    ot = it  # com.microsoft QLinear activations keep the input type
    lut(ctx, n, [n], x, QLINEAR_FUNCTIONS[n.op_type], "qlinear", xs, xz, it, ys, yz, ot, alpha)


def lut(
    ctx: BuildContext,
    n,
    origin,
    x,
    function,
    form,
    xs,
    xz,
    it,
    ys,
    yz,
    ot,
    alpha,
    op_type=None,
    scale_type: str = "float32",
    quantize_precision: str = "float32",
    dequantize_type: str | None = None,
) -> None:
    """A `lut` node: the table `compiler.ort.tables.reference_table` builds for `form`
    ("qlinear" or "qdq") under the reference's MLAS FMA flag (the exact kernel model)."""
    if not (xs > 0 and ys > 0 and np.isfinite(xs) and np.isfinite(ys)):
        raise ctx.bad(n, "scales must be finite and positive")
    try:
        spec = TableSpec(form, op_type or n.op_type, xs, xz, it, ys, yz, ot, alpha, scale_type)
        table = reference_table(
            spec,
            fma=ctx.reference.mlas_fma,
            quantize_precision=quantize_precision,
            dequantize_type=dequantize_type,
        )
    except KernelError as e:
        raise ctx.fail(n, str(e)) from None
    out = Value(n.output[0], ot, x.shape)
    ctx.emit(
        "lut",
        origin,
        [x.name],
        out,
        table=table,
        in_type=it,
        out_type=ot,
        function=function,
        in_scale=xs,
        in_zp=xz,
        out_scale=ys,
        out_zp=yz,
        source=form,
    )


@converter("", "Clip", since=11, attributes=())
def clip(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Clip of an integer input: `clip(min, max)` (an absent bound: the type's); of float32:
    the host op."""
    x = ctx.value(n, n.input[0])
    if x.dtype == "float32":
        return float_op(ctx, n)
    ctx.attrs(n)
    t = int_type(x.dtype)
    lo = ctx.scalar(n, 1, "min", default=t.min)
    hi = ctx.scalar(n, 2, "max", default=t.max)
    if int(lo) > int(hi):
        raise ctx.fail(n, f"min {lo} > max {hi}")
    ctx.emit("clip", [n], [x.name], Value(n.output[0], x.dtype, x.shape), lo=int(lo), hi=int(hi))


@converter(MS_DOMAIN, "QLinearAdd", since=1, attributes=())
@converter(MS_DOMAIN, "QLinearMul", since=1, attributes=())
def qlinear_binary(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """com.microsoft QLinearAdd/QLinearMul with one constant operand: `qlinear_binary`;
    with two activations (any numpy broadcasting): `eltwise`.

    Other forms (two constants, a constant that is not one value per output column, a
    span mode that depends on the batch size) stay on the host; a zero, negative or
    non-finite scale is bad input.
    """
    ctx.positive_scales(n, {1: "A_scale", 4: "B_scale", 6: "C_scale"})
    try:
        _qlinear_binary(ctx, n)
    except FrontendError as e:
        ctx.unsupported(n, str(e).split(": ", 1)[-1])


def _binary_params(ctx: BuildContext, n: onnx.NodeProto, it: str) -> QLinearBinaryParams:
    """The node's per-tensor scales and zero points (zero points of the input type)."""
    scales = {}
    for idx, what in ((1, "A_scale"), (4, "B_scale"), (6, "C_scale")):
        ctx.float32_scales(n, {idx: what})
        scales[what] = float(ctx.scalar(n, idx, what))
    zps = {}
    for idx, what in ((2, "A_zero_point"), (5, "B_zero_point"), (7, "C_zero_point")):
        z = ctx.const(n, idx, what, optional=True)
        if z is not None and z.dtype.name != it:
            raise ctx.fail(n, f"{what} has type {z.dtype.name}; the input is {it}")
        zps[what] = int(ctx.scalar(n, idx, what, default=0))
    try:
        return QLinearBinaryParams(
            a_scale=scales["A_scale"], a_zp=zps["A_zero_point"],
            b_scale=scales["B_scale"], b_zp=zps["B_zero_point"],
            c_scale=scales["C_scale"], c_zp=zps["C_zero_point"], dtype=it,
        )  # fmt: skip
    except KernelError as e:
        raise ctx.fail(n, str(e)) from None


def _two_activations(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Both operands are activations: one `eltwise` node over A and B (numpy broadcasting),
    its element function ORT's kernel for the span mode the shapes give (`prover.eltwise`)."""
    a = ctx.value(n, n.input[0])
    b = ctx.value(n, n.input[3])
    it = ctx.expect_dtype(n, a.name, EIGHT_BIT)
    if b.dtype != it:
        raise ctx.fail(n, f"operand B has type {b.dtype}; operand A is {it}")
    params = _binary_params(ctx, n, it)
    try:
        out_shape = tuple(int(d) for d in np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ctx.fail(n, f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
    mode = span_mode(a.shape, b.shape)

    def rows(s: tuple[int, ...], r: int) -> tuple[int, ...]:
        """`s` with a batch of `r` rows where the operand carries the output's leading dim."""
        full = len(s) == len(out_shape) and s and s[0] == out_shape[0]
        return (r, *s[1:]) if full else s

    if out_shape and len({span_mode(rows(a.shape, r), rows(b.shape, r)) for r in (1, 2)}) > 1:
        raise ctx.fail(n, "ONNX Runtime's operand roles depend on the batch size here")
    ctx.emit(
        "eltwise",
        [n],
        [a.name, b.name],
        Value(n.output[0], it, out_shape),
        binary=n.op_type,
        mode=str(mode.value),
        params=dataclasses.asdict(params),
        fma=bool(ctx.reference.mlas_fma),
        a_shape=tuple(int(d) for d in a.shape),
        b_shape=tuple(int(d) for d in b.shape),
    )


def _qlinear_binary(ctx: BuildContext, n: onnx.NodeProto) -> None:
    ctx.attrs(n)
    if len(n.input) < 8:
        raise ctx.fail(n, "needs 8 inputs")
    a_name, b_name = n.input[0], n.input[3]
    a_const, b_const = a_name in ctx.consts, b_name in ctx.consts
    if not a_const and not b_const:
        return _two_activations(ctx, n)
    if a_const == b_const:
        raise ctx.fail(n, "only a form with exactly one constant operand has an NPU form")
    x_is_a = not a_const
    x = ctx.value(n, a_name if x_is_a else b_name)
    it = ctx.expect_dtype(n, x.name, EIGHT_BIT)
    c = ctx.consts[b_name if x_is_a else a_name]
    if c.dtype.name != it:
        raise ctx.fail(n, f"constant operand has type {c.dtype.name}; the input is {it}")
    params = _binary_params(ctx, n, it)
    a_shape = x.shape if x_is_a else tuple(c.shape)
    b_shape = tuple(c.shape) if x_is_a else x.shape
    try:
        out_shape = tuple(np.broadcast_shapes(a_shape, b_shape))
    except ValueError:
        raise ctx.fail(n, f"shapes {list(a_shape)} and {list(b_shape)} do not broadcast") from None
    N = out_shape[-1] if out_shape else 1
    if (
        out_shape != x.shape
        or any(d != 1 for d in c.shape[:-1])
        or (c.ndim and c.shape[-1] not in (1, N))
    ):
        raise ctx.fail(n, f"constant operand of shape {list(c.shape)} is not one value per column")
    const = int_tuple(np.broadcast_to(c.reshape(-1), (N,)))
    mode = span_mode(a_shape, b_shape)
    if x.shape and n.op_type == "QLinearAdd":
        modes = set()
        for rows in (1, 2):
            xs = (rows,) + tuple(x.shape[1:])
            modes.add(span_mode(xs, tuple(c.shape)) if x_is_a else span_mode(tuple(c.shape), xs))
        if len(modes) > 1:
            raise ctx.fail(n, "ONNX Runtime's operand roles depend on the batch size here")
    ctx.emit(
        "qlinear_binary",
        [n],
        [x.name],
        Value(n.output[0], it, x.shape),
        binary=n.op_type,
        const=const,
        x_is_a=x_is_a,
        mode=str(mode.value),
        params=dataclasses.asdict(params),
        fma=bool(ctx.reference.mlas_fma),
    )
