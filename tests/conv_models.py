"""QLinearConv models of every window form (kernel, strides, dilations, pads/auto_pad,
groups, zero points, per-channel scales, bias), built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

NP = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "float32": np.float32}
TPS = {"int8": TP.INT8, "uint8": TP.UINT8}


def _c(name: str, v, dt: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, dtype=NP[dt]), name)


def qconv(
    C_in: int = 4,
    C_out: int = 6,
    spatial: tuple[int, ...] = (7, 6),
    kernel: tuple[int, ...] = (3, 3),
    *,
    strides=None,
    dilations=None,
    pads=None,
    auto_pad: str | None = None,
    group: int = 1,
    x_type: str = "int8",
    w_type: str = "int8",
    y_type: str | None = None,
    x_zp: int = 0,
    w_zp=0,
    y_zp: int = 0,
    x_scale: float = 0.02,
    w_scale=0.01,
    y_scale: float = 0.05,
    per_channel: bool = False,
    bias: bool = False,
    w_range: tuple[int, int] | None = None,
    activation: str | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    """x [1, C_in, *spatial] -> QLinearConv 'conv' (-> DQ -> activation -> Q) -> y."""
    rng = np.random.default_rng(seed)
    lo, hi = w_range or ((-127, 127) if w_type == "int8" else (0, 255))
    Wt = rng.integers(lo, hi + 1, size=(C_out, C_in // group, *kernel))
    y_type = y_type or x_type
    ws = (
        np.asarray([w_scale * (1 + j / C_out) for j in range(C_out)], np.float32)
        if per_channel
        else np.float32(w_scale)
    )
    wz = np.full(C_out, w_zp) if per_channel else w_zp
    inits = [
        _c("W", Wt, w_type),
        _c("x_s", x_scale, "float32"),
        _c("x_z", x_zp, x_type),
        _c("w_s", ws, "float32"),
        _c("w_z", wz, w_type),
        _c("y_s", y_scale, "float32"),
        _c("y_z", y_zp, y_type),
    ]
    ins = ["x", "x_s", "x_z", "W", "w_s", "w_z", "y_s", "y_z"]
    if bias:
        inits.append(_c("B", rng.integers(-3000, 3000, size=C_out), "int32"))
        ins.append("B")
    attrs: dict = {"group": group, "kernel_shape": list(kernel)}
    if strides is not None:
        attrs["strides"] = list(strides)
    if dilations is not None:
        attrs["dilations"] = list(dilations)
    if pads is not None:
        attrs["pads"] = list(pads)
    if auto_pad is not None:
        attrs["auto_pad"] = auto_pad
    out = "conv_out" if activation else "y"
    nodes = [oh.make_node("QLinearConv", ins, [out], name="conv", **attrs)]
    if activation:
        nodes += [
            oh.make_node("DequantizeLinear", ["conv_out", "y_s", "y_z"], ["f"], name="dq"),
            oh.make_node(activation, ["f"], ["g"], name="act"),
            oh.make_node("QuantizeLinear", ["g", "o_s", "o_z"], ["y"], name="q"),
        ]
        inits += [_c("o_s", 1 / 256, "float32"), _c("o_z", -128 if y_type == "int8" else 0, y_type)]
    g = oh.make_graph(
        nodes,
        "conv",
        [oh.make_tensor_value_info("x", TPS[x_type], [1, C_in, *spatial])],
        [oh.make_tensor_value_info("y", TPS[y_type], [1, C_out, *_out(spatial, kernel, attrs)])],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _out(spatial, kernel, attrs) -> list[int]:
    """ONNX's output spatial size."""
    r = len(spatial)
    st = attrs.get("strides", [1] * r)
    dl = attrs.get("dilations", [1] * r)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return [-(-s // t) for s, t in zip(spatial, st, strict=True)]
    p = [0] * 2 * r if auto == "VALID" else attrs.get("pads", [0] * 2 * r)
    return [
        (spatial[i] + p[i] + p[r + i] - (kernel[i] - 1) * dl[i] - 1) // st[i] + 1 for i in range(r)
    ]


def conv_inputs(m: onnx.ModelProto, seed: int, extremes: bool = False) -> dict[str, np.ndarray]:
    """Random inputs for the model's `x` (or its type's extremes, alternating)."""
    vi = m.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    dt = np.int8 if vi.type.tensor_type.elem_type == TP.INT8 else np.uint8
    info = np.iinfo(dt)
    rng = np.random.default_rng(seed)
    if extremes:
        x = rng.choice([info.min, info.max], size=shape)
    else:
        x = rng.integers(info.min, info.max + 1, size=shape)
    return {"x": x.astype(dt)}


def conv_integer(
    x_type: str = "uint8", w_type: str = "uint8", x_zp: int = 7, w_zp=None, seed: int = 0
) -> onnx.ModelProto:
    """x [1, 4, 6, 7] -> ConvInteger(W [6, 2, 3, 3], group 2, pads, strides) 'conv' -> y int32."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(NP[w_type])
    W = rng.integers(info.min, info.max + 1, size=(6, 2, 3, 3))
    inits = [_c("W", W, w_type), _c("xz", x_zp, x_type)]
    ins = ["x", "W", "xz"]
    if w_zp is not None:
        inits.append(_c("wz", w_zp, w_type))
        ins.append("wz")
    node = oh.make_node(
        "ConvInteger", ins, ["y"], name="conv", group=2, pads=[1, 0, 1, 2], strides=[1, 2]
    )
    g = oh.make_graph(
        [node],
        "conv_integer",
        [oh.make_tensor_value_info("x", TPS[x_type], [1, 4, 6, 7])],
        [oh.make_tensor_value_info("y", TP.INT32, [1, 6, 6, 4])],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def qdq_conv(seed: int = 0, w_range: tuple[int, int] = (-64, 63)) -> onnx.ModelProto:
    """x uint8 [1, 4, 9, 9] -> DQ -> Conv(DQ W int8, DQ int32 bias, stride 2, pads 1) -> Q
    uint8: the QDQ group ORT's default session runs as QLinearConv."""
    rng = np.random.default_rng(seed)
    inits = [
        _c("W", rng.integers(w_range[0], w_range[1] + 1, size=(8, 4, 3, 3)), "int8"),
        _c("xs", 0.02, "float32"),
        _c("xz", 128, "uint8"),
        _c("ws", 0.01, "float32"),
        _c("wz", 0, "int8"),
        _c("Bq", rng.integers(-500, 500, size=8), "int32"),
        _c("bs", 0.0002, "float32"),
        _c("bz", 0, "int32"),
        _c("ys", 0.05, "float32"),
        _c("yz", 3, "uint8"),
    ]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
        oh.make_node("DequantizeLinear", ["W", "ws", "wz"], ["wf"]),
        oh.make_node("DequantizeLinear", ["Bq", "bs", "bz"], ["B"]),
        oh.make_node("Conv", ["xf", "wf", "B"], ["yf"], pads=[1, 1, 1, 1], strides=[2, 2]),
        oh.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"]),
    ]
    g = oh.make_graph(
        nodes,
        "qdq_conv",
        [oh.make_tensor_value_info("x", TP.UINT8, [1, 4, 9, 9])],
        [oh.make_tensor_value_info("y", TP.UINT8, [1, 8, 5, 5])],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m
