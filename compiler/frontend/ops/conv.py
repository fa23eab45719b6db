"""Convolutions: a pointwise (1x1) QLinearConv is an integer `matmul` over channels
(channel axis 1, NCHW); any other QLinearConv stays on the host.

Versions read: QLinearConv 10 (its only version).
"""

from __future__ import annotations

import numpy as np
import onnx

from compiler.ir.graph import Value

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from ..registry import converter
from .integer_matmul import (
    check_acc,
    emit_matmul,
    ort_kernel_types,
    out_type,
    qlinear_quant,
    requant_scales,
)

CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@converter("", "QLinearConv", since=10, attributes=CONV_ATTRIBUTES, host_fallback=True)
def qlinear_conv(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Pointwise (1x1) QLinearConv: a matmul over channels, channel axis 1 (NCHW)."""
    ort_kernel_types(ctx, n, 3, 7)
    ctx.positive_scales(n, {1: "x_scale", 4: "w_scale", 6: "y_scale"})  # before any form
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    x = ctx.value(n, n.input[0])
    W = ctx.const(n, 3, "weights")
    if W.dtype.name not in EIGHT_BIT:
        raise ctx.fail(n, f"weights have type {W.dtype.name}; supported: int8, uint8")
    if W.ndim != 4 or W.shape[2:] != (1, 1):
        raise ctx.fail(
            n, f"only pointwise (1x1) kernels are supported, got weights {list(W.shape)}"
        )
    attrs = ctx.attrs(n)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if list(attrs.get("kernel_shape", [1, 1])) != [1, 1]:
        raise ctx.fail(n, f"kernel_shape {list(attrs['kernel_shape'])} is not [1, 1]")
    if (
        int(attrs.get("group", 1)) != 1
        or any(int(v) != 1 for v in attrs.get("strides", []))
        or any(int(v) != 1 for v in attrs.get("dilations", []))
        or any(int(v) != 0 for v in attrs.get("pads", []))
        or auto_pad not in (b"NOTSET", b"VALID", "NOTSET", "VALID")
    ):
        raise ctx.fail(n, "only group=1, stride 1, dilation 1, no padding are supported")
    if len(x.shape) != 4 or x.shape[1] != W.shape[1]:
        raise ctx.fail(n, f"input shape {list(x.shape)} does not match weights {list(W.shape)}")
    ctx.w_dtype = W.dtype.name
    w = W[:, :, 0, 0].T.astype(np.int64)
    N = w.shape[1]
    a_scale, a_zp, bs, w_zp, y_scale, y_zp_arr = qlinear_quant(
        ctx, n, N, ("x", "w"), "y_zero_point must be a scalar (per-tensor)"
    )
    bias_arr = ctx.const(n, 8, "B", optional=True)
    bias = None if bias_arr is None else tuple(int(v) for v in bias_arr.reshape(-1))
    if bias is not None and len(bias) != N:
        raise ctx.fail(n, f"bias must have {N} entries")
    out_t = out_type(ctx, n, y_zp_arr)
    scales = requant_scales(ctx, n, a_scale, bs, y_scale)
    check_acc(ctx, n, w, w_zp, at, a_zp, None if bias is None else np.asarray(bias))
    out = Value(n.output[0], out_t, (x.shape[0], N, x.shape[2], x.shape[3]))
    requant = {
        "scheme": "float",
        "scale": scales,
        "zp": int(y_zp_arr.reshape(()).item()),
        "out": out_t,
    }
    emit_matmul(
        ctx,
        n,
        x.name,
        out,
        kind="Conv",
        layout="channels_first",
        w=w,
        a_zp=a_zp,
        w_zp=w_zp,
        a_type=at,
        bias=bias,
        requant=requant,
    )
