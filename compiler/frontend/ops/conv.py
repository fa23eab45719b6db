"""Convolutions: QLinearConv as an integer `matmul` over the window (channel axis 1, NCHW).

A pointwise conv (1x1 kernel, stride 1, no padding, one group) is a matmul over channels
with no window. Any other kernel, stride, dilation, padding (explicit or `auto_pad`) and
group count is the same node with a `window` (`prover.conv.Window`): its input row is the
patch of the output element (padding reads the input zero point), its weights [K_g, C_out]
with K_g = C_in / group * prod(kernel); see `prover.conv`. 1-D and 2-D convs are read.

ConvInteger is the same node with the int32 accumulator as output (no requantization).

Versions read: QLinearConv 10 and ConvInteger 10 (their only versions).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from compiler.ir.graph import Value
from prover.conv import Window
from prover.domain import KernelError
from prover.inttypes import int_tuple

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from ..registry import converter
from .integer_matmul import (
    check_acc,
    column_param,
    emit_matmul,
    ort_kernel_types,
    out_type,
    qlinear_quant,
    requant_scales,
    run_time_zp,
)

CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def conv_window(
    ctx: BuildContext,
    n: onnx.NodeProto,
    attrs: dict[str, Any],
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    channels: int,
) -> Window:
    """The node's window from its attributes and input spatial size (ONNX's `auto_pad` rule:
    SAME_* pads to ceil(in / stride) outputs, the odd pad at the end for SAME_UPPER)."""
    r = len(spatial)
    if "kernel_shape" in attrs and tuple(int(v) for v in attrs["kernel_shape"]) != kernel:
        raise ctx.fail(
            n,
            f"kernel_shape {list(attrs['kernel_shape'])} is not {list(kernel)}, the weights' kernel",
        )
    strides = tuple(int(v) for v in attrs.get("strides", [1] * r))
    dil = tuple(int(v) for v in attrs.get("dilations", [1] * r))
    if len(strides) != r or len(dil) != r:
        raise ctx.bad(n, f"strides {list(strides)} / dilations {list(dil)} need {r} entries")
    auto = _text(attrs.get("auto_pad", "NOTSET"))
    if auto not in AUTO_PADS:
        raise ctx.bad(n, f"auto_pad {auto!r} is not one of {', '.join(AUTO_PADS)}")
    if auto == "NOTSET":
        pads = tuple(int(v) for v in attrs.get("pads", [0] * 2 * r))
        if len(pads) != 2 * r:
            raise ctx.bad(n, f"pads {list(pads)} need {2 * r} entries")
    elif auto == "VALID":
        pads = (0,) * (2 * r)
    else:
        begin, end = [], []
        for i in range(r):
            out = -(-spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - spatial[i])
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        pads = tuple(begin + end)
    try:
        win = Window(kernel, strides, dil, pads, int(attrs.get("group", 1)), channels)
        win.out_spatial(spatial)
    except KernelError as e:
        raise ctx.bad(n, str(e)) from None
    return win


def _operands(ctx: BuildContext, n: onnx.NodeProto, w_index: int):
    """(activation type, input value, constant 8-bit weights, window) of a QLinearConv or
    ConvInteger, their shapes checked against each other and the group count."""
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    x = ctx.value(n, n.input[0])
    W = ctx.const(n, w_index, "weights")
    if W.dtype.name not in EIGHT_BIT:
        raise ctx.fail(n, f"weights have type {W.dtype.name}; supported: int8, uint8")
    if W.ndim not in (3, 4) or len(x.shape) != W.ndim:
        raise ctx.fail(
            n,
            f"only 1-D and 2-D convs are read, got input {list(x.shape)}, weights {list(W.shape)}",
        )
    attrs = ctx.attrs(n)
    win = conv_window(ctx, n, attrs, tuple(x.shape[2:]), tuple(W.shape[2:]), int(x.shape[1]))
    g = win.group
    if x.shape[1] != W.shape[1] * g or W.shape[0] % g:
        raise ctx.bad(
            n, f"input shape {list(x.shape)} does not match weights {list(W.shape)} in {g} group(s)"
        )
    return at, x, W, win


@converter("", "QLinearConv", since=10, attributes=CONV_ATTRIBUTES, host_fallback=True)
def qlinear_conv(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """QLinearConv: a matmul over the window (a pointwise one over channels), NCHW."""
    ort_kernel_types(ctx, n, 3, 7)
    ctx.positive_scales(n, {1: "x_scale", 4: "w_scale", 6: "y_scale"})  # before any form
    at, x, W, win = _operands(ctx, n, 3)
    g = win.group
    pointwise = (
        W.ndim == 4
        and g == 1
        and set(win.kernel + win.strides + win.dilations) == {1}
        and not any(win.pads)
    )
    ctx.w_dtype = W.dtype.name
    # [K_g, C_out], K order (c, k...); 8-bit as read (`emit_matmul` keeps them narrow)
    w = W.reshape(W.shape[0], -1).T
    N = w.shape[1]
    a_scale, a_zp, bs, w_zp, y_scale, y_zp_arr = qlinear_quant(
        ctx, n, N, ("x", "w"), "y_zero_point must be a scalar (per-tensor)"
    )
    bias_arr = ctx.const(n, 8, "B", optional=True)
    bias = None if bias_arr is None else int_tuple(bias_arr.reshape(-1))
    if bias is not None and len(bias) != N:
        raise ctx.fail(n, f"bias must have {N} entries")
    out_t = out_type(ctx, n, y_zp_arr)
    scales = requant_scales(ctx, n, a_scale, bs, y_scale)
    check_acc(ctx, n, w, w_zp, at, a_zp, None if bias is None else np.asarray(bias))
    out_sp = tuple(x.shape[2:]) if pointwise else win.out_spatial(tuple(x.shape[2:]))
    out = Value(n.output[0], out_t, (x.shape[0], N, *out_sp))
    requant = {
        "scheme": "float",
        "scale": scales,
        "zp": int(y_zp_arr.reshape(()).item()),
        "out": out_t,
    }
    extra = {} if pointwise else {"window": win}
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
        **extra,
    )


@converter("", "ConvInteger", since=10, attributes=CONV_ATTRIBUTES, host_fallback=True)
def conv_integer(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """ConvInteger with constant 8-bit weights: a `matmul` over the window (NCHW) with the
    int32 accumulator as output (zero points scalar, or w per output channel). The input
    zero point may be computed at run time (dynamic quantization's DynamicQuantizeLinear:
    ViT's patch embedding): the NPU reads it as an operand, padding included."""
    at, x, W, win = _operands(ctx, n, 1)
    ctx.w_dtype = W.dtype.name
    w = W.reshape(W.shape[0], -1).T
    N = w.shape[1]
    zp_in = run_time_zp(ctx, n, 2, at)
    a_zp = 0 if zp_in else int(ctx.scalar(n, 2, "x_zero_point", default=0))
    w_zp = column_param(ctx, n, 3, "w_zero_point", N, default=0)
    check_acc(ctx, n, w, w_zp, at, None if zp_in else a_zp)
    out = Value(n.output[0], "int32", (x.shape[0], N, *win.out_spatial(tuple(x.shape[2:]))))
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
        bias=None,
        requant=None,
        window=win,
        **({"a_zp_input": zp_in} if zp_in else {}),
    )
