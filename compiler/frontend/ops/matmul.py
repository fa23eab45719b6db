"""Integer matmuls: QLinearMatMul, MatMulInteger and com.microsoft QGemm, each one IR
`matmul` (float MatMul / Gemm run on the host: `.host`).

Versions read: QLinearMatMul 10 and 21 (21 adds float16/bfloat16 scales and 4-bit and
float8 types: checked here, the other forms stay on the host); MatMulInteger 10;
com.microsoft QGemm 1.
"""

from __future__ import annotations

import numpy as np
import onnx

from compiler.errors import FrontendError
from prover.domain import KernelError
from prover.inttypes import int_tuple
from prover.qgemm import QGemmParams, output_scales

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from ..registry import MS_DOMAIN, converter
from .integer_matmul import (
    check_acc,
    column_param,
    emit_matmul,
    matmul_out,
    ort_kernel_types,
    out_type,
    qlinear_quant,
    requant_scales,
    run_time_zp,
    weights,
)
from .matmul_act import qlinear_matmul_act


@converter("", "QLinearMatMul", since=10, attributes=(), host_fallback=True)
def qlinear_matmul(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """QLinearMatMul with constant 8-bit weights: `matmul` with its float32 requantization."""
    ort_kernel_types(ctx, n, 3, 7)
    ctx.positive_scales(n, {1: "a_scale", 4: "b_scale", 6: "y_scale"})  # before any form
    ctx.attrs(n)
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    a = ctx.value(n, n.input[0])
    # attention's Q.K^T and P.V: both operands activations (an overridable initializer
    # keeps its own message: weights the user may replace at run time stay on the host)
    if n.input[3] in ctx.values and n.input[3] not in ctx.overridable:
        return qlinear_matmul_act(ctx, n)
    w = weights(ctx, n, 3)
    N = w.shape[1]
    a_scale, a_zp, bs, w_zp, y_scale, y_zp_arr = qlinear_quant(
        ctx, n, N, ("a", "b"), "y_zero_point must be a scalar"
    )
    y_zp = int(y_zp_arr.reshape(()).item())
    out_t = out_type(ctx, n, y_zp_arr)
    scales = requant_scales(ctx, n, a_scale, bs, y_scale)
    if any(not (s > 0 and np.isfinite(s)) for s in scales):
        raise ctx.bad(n, "requantization scale must be finite and positive")
    check_acc(ctx, n, w, w_zp, at, a_zp)
    out = matmul_out(ctx, n, a, w, out_t)
    requant = {"scheme": "float", "scale": scales, "zp": y_zp, "out": out_t}
    emit_matmul(
        ctx, n, a.name, out, w=w, a_zp=a_zp, w_zp=w_zp, a_type=at, bias=None, requant=requant
    )


@converter("", "MatMulInteger", since=10, attributes=(), host_fallback=True)
def matmul_integer(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """MatMulInteger with constant 8-bit weights: `matmul` with the int32 accumulator as
    output. The activation's zero point may be computed at run time (dynamic quantization:
    DynamicQuantizeLinear -> MatMulInteger): the NPU instruction reads it as it runs."""
    ctx.attrs(n)
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    a = ctx.value(n, n.input[0])
    w = weights(ctx, n, 1)
    N = w.shape[1]
    zp_in = run_time_zp(ctx, n, 2, at)
    a_zp = 0 if zp_in else int(ctx.scalar(n, 2, "a_zero_point", default=0))
    w_zp = column_param(ctx, n, 3, "b_zero_point", N, default=0)
    check_acc(ctx, n, w, w_zp, at, None if zp_in else a_zp)
    out = matmul_out(ctx, n, a, w, "int32")
    extra = {"a_zp_input": zp_in} if zp_in else {}
    emit_matmul(
        ctx, n, a.name, out, w=w, a_zp=a_zp, w_zp=w_zp, a_type=at, bias=None, requant=None,
        **extra,
    )  # fmt: skip


@converter(MS_DOMAIN, "QGemm", since=1, attributes=("alpha", "transA", "transB"))
def qgemm(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """com.microsoft QGemm with y_scale: the integer `matmul` with bias and QGemm's scale.

    transA, a float output (no y_scale) or a bias varying by row stay on the host; a zero,
    negative or non-finite scale is bad input.
    """
    ort_kernel_types(ctx, n, 3, 8)
    ctx.positive_scales(n, {1: "a_scale", 4: "b_scale", 7: "y_scale"})
    try:
        _qgemm(ctx, n)
    except FrontendError as e:
        ctx.unsupported(n, str(e).split(": ", 1)[-1])


def _qgemm(ctx: BuildContext, n: onnx.NodeProto) -> None:
    attrs = ctx.attrs(n)
    if int(attrs.get("transA", 0)):
        raise ctx.fail(n, "transA=1 (a transposed activation) has no NPU form")
    if len(n.input) < 8 or not n.input[7]:
        raise ctx.fail(n, "a QGemm without y_scale has a float output")
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    a = ctx.value(n, n.input[0])
    B = ctx.const(n, 3, "B")
    if B.dtype.name not in EIGHT_BIT or B.ndim != 2:
        raise ctx.fail(n, f"B must be a 2-D 8-bit constant, got {B.dtype.name}{list(B.shape)}")
    w = B.T if int(attrs.get("transB", 0)) else B  # 8-bit, stored narrow by emit_matmul
    ctx.w_dtype = B.dtype.name
    N = w.shape[1]
    ctx.float32_scales(n, {1: "a_scale", 4: "b_scale", 7: "y_scale"})
    b_scale = ctx.const(n, 4, "b_scale").reshape(-1)
    b_zp_arr = ctx.const(n, 5, "b_zero_point", optional=True)
    b_zp = np.zeros(b_scale.shape, np.int64) if b_zp_arr is None else b_zp_arr.reshape(-1)
    y_zp_arr = ctx.const(n, 8, "y_zero_point", optional=True)
    if y_zp_arr is not None and y_zp_arr.size != 1:
        raise ctx.fail(n, "y_zero_point must be a scalar (per-tensor)")
    try:
        p = QGemmParams(
            a_type=at,
            b_type=B.dtype.name,
            a_scale=float(ctx.scalar(n, 1, "a_scale")),
            a_zp=int(ctx.scalar(n, 2, "a_zero_point", default=0)),
            b_scale=tuple(float(v) for v in b_scale),
            b_zp=tuple(int(v) for v in b_zp),
            y_scale=float(ctx.scalar(n, 7, "y_scale")),
            y_zp=0 if y_zp_arr is None else int(y_zp_arr.reshape(()).item()),
            y_type=at if y_zp_arr is None else y_zp_arr.dtype.name,
            alpha=float(attrs.get("alpha", 1.0)),
            trans_b=bool(int(attrs.get("transB", 0))),
        )
    except KernelError as e:
        raise ctx.fail(n, str(e)) from None
    if len(p.b_scale) not in (1, N):
        raise ctx.fail(n, f"b_scale must have 1 or {N} entries")
    C = ctx.const(n, 6, "C", optional=True)
    bias = None
    if C is not None:
        if C.dtype.name != "int32":
            raise ctx.fail(n, f"bias C has type {C.dtype.name}; QGemm's is int32")
        if any(d != 1 for d in C.shape[:-1]) or (C.ndim and C.shape[-1] not in (1, N)):
            raise ctx.fail(n, f"bias C of shape {list(C.shape)} varies by row")
        bias = int_tuple(np.broadcast_to(C.reshape(-1), (N,)))
    w_zp = p.b_zp[0] if len(p.b_zp) == 1 else p.b_zp
    check_acc(ctx, n, w, w_zp, at, p.a_zp, None if bias is None else np.asarray(bias))
    scales = tuple(float(v) for v in np.broadcast_to(output_scales(p), (N,)))
    if len(a.shape) != 2:
        raise ctx.fail(n, f"A must be 2-D, got shape {list(a.shape)}")
    out = matmul_out(ctx, n, a, w, p.out.name)
    assert p.y_zp is not None  # given above (0 without y_zero_point)
    requant = {"scheme": "float", "scale": scales, "zp": int(p.y_zp), "out": p.out.name}
    emit_matmul(
        ctx, n, a.name, out, kind="Gemm", w=w, a_zp=p.a_zp, w_zp=w_zp, a_type=at,
        bias=bias, requant=requant,
    )  # fmt: skip
