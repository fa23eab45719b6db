"""Pools: com.microsoft QLinearGlobalAveragePool as a depthwise sum over the whole image.

ONNX Runtime's kernel (MLAS `MlasQLinearGlobalAveragePoolNchw/Nhwc`) sums each channel's
image exactly in int32, adds `-x_zero_point * image_size`, and requantizes that int32 with
one float32 scale `x_scale / (y_scale * float(image_size))` (`MlasRequantizeOutput`:
float32 product, clamp, round half to even, plus the output zero point). That is exactly a
depthwise conv (`prover.conv`) whose window is the whole image, with all-one weights of zero
point 0, followed by the `float` requantization: the IR node is a `matmul` with that
`window` and `kind="Pool"`, run on the target's Pool unit (`[compute.Pool]`).

ORT refuses (throws at run time) an image of 2^24 elements or more and a scale outside
[2^-32, 256): bad input here too.

MaxPool of int8/uint8 (ONNX's meaning, which ORT computes): the largest input element of
each window, padding never the maximum (`prover.pool`); kernel, strides, dilations, explicit
pads or `auto_pad`, `ceil_mode` (the extra end positions are padding too), NCHW 1-D and 2-D;
an `Indices` output that is read keeps the node on the host. Float MaxPool runs on the host.

com.microsoft QLinearConcat: each input whose (scale, zero point) differ from the output's is
first mapped through ORT's 256-entry table (`QlinearBuildLookupTable` with the identity:
dequantize in float32, divide by y_scale, round half to even, add y_zero_point, saturate),
a `lut` node of function `identity`; then one `concat` node.

com.microsoft QLinearAveragePool runs on the host: ORT sums the dequantized float32 values
of each window, divides in float32 and rounds after adding the output zero point
(`quantize_value` in qlinear_pool.cc), which no integer window sum with one requantization
equals (measured: rounding half-steps differ), so it has no exact NPU form here.

Versions read: QLinearGlobalAveragePool 1 (its only version; attribute `channels_last`);
QLinearAveragePool 1 (hosted, by name);
QLinearConcat 1 (attribute `axis`);
MaxPool 1+ (8 adds `storage_order` and `Indices`, 10 `ceil_mode` and `dilations`, 12 int8
and uint8).
"""

from __future__ import annotations

import numpy as np
import onnx

from compiler.ir.graph import Value
from prover.conv import Window
from prover.inttypes import int_type
from prover.pool import min_reads

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from ..registry import MS_DOMAIN, converter
from .conv import conv_window
from .host import float_op
from .integer_matmul import check_acc, emit_matmul

# ORT's CheckQLinearGlobalAveragePoolScaleAndSize
MAX_IMAGE = 1 << 24
MIN_SCALE, MAX_SCALE = 2.0**-32, 256.0


def gap_scale(x_scale: float, y_scale: float, image: int) -> float:
    """ORT's float32 requantization scale of a global average over `image` elements."""
    with np.errstate(all="ignore"):
        return float(np.float32(x_scale) / (np.float32(y_scale) * np.float32(image)))


@converter(MS_DOMAIN, "QLinearGlobalAveragePool", since=1, attributes=("channels_last",),
           host_fallback=True)  # fmt: skip
def qlinear_global_average_pool(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """QLinearGlobalAveragePool: a depthwise all-ones conv over the whole image, then ORT's
    float32 requantization (NCHW, or NHWC with `channels_last`)."""
    ctx.positive_scales(n, {1: "x_scale", 3: "y_scale"})
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    x = ctx.value(n, n.input[0])
    last = bool(ctx.attrs(n).get("channels_last", 0))
    ctx.float32_scales(n, {1: "x_scale", 3: "y_scale"})
    xs, ys = ctx.scalar(n, 1, "x_scale"), ctx.scalar(n, 3, "y_scale")
    x_zp = ctx.const(n, 2, "x_zero_point")
    y_zp = ctx.const(n, 4, "y_zero_point")
    for what, zp in (("x_zero_point", x_zp), ("y_zero_point", y_zp)):
        if zp.dtype.name != at or zp.size != 1:
            raise ctx.bad(n, f"{what} must be one {at} value, got {zp.dtype.name} {list(zp.shape)}")
    if len(x.shape) < 3:
        raise ctx.bad(n, f"input {list(x.shape)} has fewer than 3 dimensions")
    spatial = tuple(x.shape[1:-1]) if last else tuple(x.shape[2:])
    if len(spatial) > 2:
        raise ctx.fail(n, f"only 1-D and 2-D pools are read, got input {list(x.shape)}")
    c = int(x.shape[-1] if last else x.shape[1])
    image = int(np.prod(spatial, dtype=np.int64))
    scale = gap_scale(xs, ys, image)
    if image >= MAX_IMAGE or not MIN_SCALE <= scale < MAX_SCALE:
        raise ctx.bad(
            n,
            f"image of {image} elements with scale {scale}: ONNX Runtime computes only "
            f"images under 2^24 and scales x_scale/(y_scale*image) in [2^-32, 256)",
        )
    r = len(spatial)
    win = Window(spatial, (1,) * r, (1,) * r, (0,) * (2 * r), c, c)
    # all-one weights [K_g, C] of zero point 0 (uint8 for uint8 activations: no int8 pair
    # products, which only ORT's QLinearConv kernels have)
    ctx.w_dtype = at
    w = np.ones((image, c), dtype=np.int64)
    a_zp = int(x_zp.reshape(()).item())
    check_acc(ctx, n, w, 0, at, a_zp)
    out_shape = (x.shape[0], *(1,) * r, c) if last else (x.shape[0], c, *(1,) * r)
    requant = {"scheme": "float", "scale": scale, "zp": int(y_zp.reshape(()).item()), "out": at}
    emit_matmul(
        ctx,
        n,
        x.name,
        Value(n.output[0], at, out_shape),
        kind="Pool",
        layout="channels_last" if last else "channels_first",
        w=w,
        a_zp=a_zp,
        w_zp=0,
        a_type=at,
        bias=None,
        requant=requant,
        window=win,
    )


MAX_POOL_ATTRIBUTES = (
    "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides",
)  # fmt: skip


def _ceil_window(ctx: BuildContext, n: onnx.NodeProto, win: Window, spatial) -> Window:
    """The window with `ceil_mode`'s extra output positions as end padding (ORT's sizes:
    ceil, less a last window that would start in the end padding, where ONNX's shape
    inference keeps it: those are refused)."""
    r, extra = win.rank, []
    for i in range(r):
        span = (win.kernel[i] - 1) * win.dilations[i] + 1
        padded = spatial[i] + win.pads[i] + win.pads[r + i]
        out = -(-(padded - span) // win.strides[i]) + 1
        if (out - 1) * win.strides[i] >= spatial[i] + win.pads[i]:
            raise ctx.fail(
                n,
                "ceil_mode's last window starts in the end padding (ONNX's and ORT's sizes differ)",
            )
        extra.append(max(0, (out - 1) * win.strides[i] + span - padded))
    pads = win.pads[:r] + tuple(win.pads[r + i] + extra[i] for i in range(r))
    return Window(win.kernel, win.strides, win.dilations, pads, win.group, win.channels)


@converter("", "MaxPool", since=1, attributes=MAX_POOL_ATTRIBUTES, host_fallback=True)
def max_pool(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """MaxPool of int8/uint8: the `max_pool` node over its window (NCHW); float: the host."""
    x = ctx.value(n, n.input[0])
    if x.dtype not in EIGHT_BIT:
        return float_op(ctx, n)
    if (
        len(n.output) > 1
        and n.output[1]
        and (ctx.onnx_users.get(n.output[1]) or n.output[1] in ctx.graph_outputs)
    ):
        return ctx.unsupported(n, "a MaxPool whose Indices output is read")
    attrs = ctx.attrs(n)
    if "kernel_shape" not in attrs:
        raise ctx.bad(n, "kernel_shape is required")
    kernel = tuple(int(k) for k in attrs["kernel_shape"])
    spatial = tuple(x.shape[2:])
    if len(kernel) != len(spatial) or len(spatial) not in (1, 2):
        raise ctx.fail(n, f"only 1-D and 2-D pools are read, got input {list(x.shape)}")
    c = int(x.shape[1])
    win = conv_window(ctx, n, {**attrs, "group": c}, spatial, kernel, c)
    if int(attrs.get("ceil_mode", 0)):
        win = _ceil_window(ctx, n, win, spatial)
    if min_reads(spatial, win) < 1:
        raise ctx.fail(n, "a window reads only padding (ONNX gives no maximum for it)")
    out = Value(n.output[0], x.dtype, (x.shape[0], c, *win.out_spatial(spatial)))
    ctx.emit("max_pool", [n], [x.name], out, window=win, layout="channels_first")


def requant_table(dtype: str, x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> tuple:
    """ORT's QLinearConcat table of one input (offset order: entry i is code min + i)."""
    t = int_type(dtype)
    x = np.arange(t.min, t.max + 1, dtype=np.int64)
    with np.errstate(all="ignore"):
        deq = np.float32(x_scale) * (x - int(x_zp)).astype(np.float32)
        q = np.rint(deq / np.float32(y_scale))
    return tuple(int(v) for v in np.clip(q.astype(np.float64) + int(y_zp), t.min, t.max))


@converter(MS_DOMAIN, "QLinearConcat", since=1, attributes=("axis",), host_fallback=True)
def qlinear_concat(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """QLinearConcat with constant scales and zero points: per input ORT's requantization
    table (a `lut`, left out where it is the identity), then `concat` along `axis`."""
    if len(n.input) < 5 or (len(n.input) - 2) % 3:
        raise ctx.bad(
            n, "inputs must be y_scale, y_zero_point, then (x, scale, zero point) triples"
        )
    axis = int(ctx.attrs(n).get("axis", 0))
    ctx.positive_scales(n, {i: "scale" for i in range(0, len(n.input), 3)})
    ctx.float32_scales(n, {i: "scale" for i in range(0, len(n.input), 3)})
    ys = ctx.scalar(n, 0, "y_scale")
    yz_arr = ctx.const(n, 1, "y_zero_point")
    dt = yz_arr.dtype.name
    if dt not in EIGHT_BIT:
        raise ctx.bad(n, f"y_zero_point has type {dt}; supported: int8, uint8")
    yz = int(yz_arr.reshape(-1)[0])
    parts, shape0 = [], None
    for k in range(2, len(n.input), 3):
        x = ctx.value(n, n.input[k])
        z = ctx.const(n, k + 2, "zero point")
        if x.dtype != dt or z.dtype.name != dt or z.size != 1:
            raise ctx.bad(n, f"input '{x.name}' and its zero point must be one {dt} value")
        r = len(x.shape)
        if shape0 is None:
            shape0 = x.shape
            if not -r <= axis < r:
                raise ctx.bad(n, f"axis {axis} is outside a rank-{r} tensor")
            axis %= r
        elif len(x.shape) != len(shape0) or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, shape0, strict=True)) if i != axis
        ):
            raise ctx.bad(n, f"input shapes {list(shape0)} and {list(x.shape)} do not concatenate")
        xs = ctx.scalar(n, k + 1, "scale")
        table = requant_table(dt, xs, int(z.reshape(()).item()), ys, yz)
        if table == tuple(range(int_type(dt).min, int_type(dt).max + 1)):
            parts.append(x)
            continue
        rq = Value(ctx.new_name(f"{n.output[0]}.in{(k - 2) // 3}"), dt, x.shape)
        ctx.emit(
            "lut", [n], [x.name], rq, table=table, in_type=dt, out_type=dt,
            function="identity", in_scale=xs, in_zp=int(z.reshape(()).item()),
            out_scale=ys, out_zp=yz, source="qlinear_concat",
        )  # fmt: skip
        parts.append(rq)
    assert shape0 is not None
    out_shape = list(shape0)
    out_shape[axis] = sum(p.shape[axis] for p in parts)
    ctx.emit(
        "concat", [n], [p.name for p in parts], Value(n.output[0], dt, tuple(out_shape)), axis=axis
    )


@converter(MS_DOMAIN, "QLinearAveragePool", since=1)
def qlinear_average_pool(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """QLinearAveragePool: the host (ORT's float32 window average has no integer form)."""
    ctx.unsupported(
        n,
        "ONNX Runtime averages the dequantized float32 values and rounds after adding the "
        "output zero point; no integer window sum with one requantization equals it",
    )
