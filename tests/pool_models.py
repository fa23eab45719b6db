"""Pool and data-movement models (com.microsoft QLinearGlobalAveragePool, QLinearConv ->
pool chains), built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

NP = {"int8": np.int8, "uint8": np.uint8}
TPS = {"int8": TP.INT8, "uint8": TP.UINT8}


def _c(name: str, v, dt) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, dtype=dt), name)


def gap(
    shape: tuple[int, ...] = (1, 8, 7, 7),
    dtype: str = "uint8",
    *,
    x_scale: float = 0.02,
    x_zp: int = 3,
    y_scale: float = 0.01,
    y_zp: int = 5,
    channels_last: int = 0,
) -> onnx.ModelProto:
    """x `shape` -> QLinearGlobalAveragePool 'gap' -> y (every spatial axis 1)."""
    et = TPS[dtype]
    node = oh.make_node(
        "QLinearGlobalAveragePool",
        ["x", "xs", "xz", "ys", "yz"],
        ["y"],
        domain="com.microsoft",
        channels_last=channels_last,
        name="gap",
    )
    inits = [
        _c("xs", x_scale, np.float32),
        _c("xz", x_zp, NP[dtype]),
        _c("ys", y_scale, np.float32),
        _c("yz", y_zp, NP[dtype]),
    ]
    r = len(shape) - 2
    if channels_last:
        out = [shape[0], *([1] * r), shape[-1]]
    else:
        out = [shape[0], shape[1], *([1] * r)]
    g = oh.make_graph(
        [node],
        "gap",
        [oh.make_tensor_value_info("x", et, list(shape))],
        [oh.make_tensor_value_info("y", et, out)],
        inits,
    )
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m


def pool_inputs(m: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Random inputs for `x`; seed 2 draws only the type's extremes."""
    vi = m.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    dt = np.int8 if vi.type.tensor_type.elem_type == TP.INT8 else np.uint8
    info = np.iinfo(dt)
    rng = np.random.default_rng(seed)
    if seed == 2:
        return {"x": rng.choice([info.min, info.max], size=shape).astype(dt)}
    return {"x": rng.integers(info.min, info.max + 1, size=shape).astype(dt)}


def conv_chain(
    convs: tuple[str, ...] = ("3x3", "1x1"),
    *,
    C: int = 4,
    spatial: tuple[int, int] = (6, 5),
    pool: bool = False,
    expose: int | None = None,
    flatten: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """int8 x [1, C, *spatial] -> QLinearConv 'c0', 'c1', ... ("3x3": pads 1, "1x1",
    "dw": depthwise 3x3 pads 1, "mp": a MaxPool 3x3 pads 1; every one keeps C channels and
    the spatial size) -> an
    optional QLinearGlobalAveragePool 'gap' -> y; `expose=k` makes conv k's output a
    graph output too (a host reader of the NCHW tensor); `flatten`: a Flatten after the
    pool."""
    rng = np.random.default_rng(seed)
    inits = [
        _c("s", 0.02, np.float32),
        _c("z", 1, np.int8),
        _c("ws", 0.01, np.float32),
        _c("wz", 0, np.int8),
    ]
    nodes, prev = [], "x"
    for k, kind in enumerate(convs):
        if kind == "mp":  # MaxPool 3x3, pads 1: the spatial size kept
            mp = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
            nodes.append(oh.make_node("MaxPool", [prev], [f"c{k}_out"], name=f"c{k}", **mp))
            prev = f"c{k}_out"
            continue
        kernel = (1, 1) if kind == "1x1" else (3, 3)
        group = C if kind == "dw" else 1
        W = rng.integers(-127, 128, size=(C, C // group, *kernel))
        inits.append(_c(f"W{k}", W, np.int8))
        attrs = {"kernel_shape": list(kernel), "group": group}
        if kernel == (3, 3):
            attrs["pads"] = [1, 1, 1, 1]
        out = f"c{k}_out"
        nodes.append(
            oh.make_node(
                "QLinearConv",
                [prev, "s", "z", f"W{k}", "ws", "wz", "s", "z"],
                [out],
                name=f"c{k}",
                **attrs,
            )
        )
        prev = out
    shape = [1, C, *spatial]
    if pool:
        nodes.append(
            oh.make_node(
                "QLinearGlobalAveragePool",
                [prev, "s", "z", "s", "z"],
                ["p" if flatten else "y"],
                domain="com.microsoft",
                name="gap",
            )
        )
        y_shape = [1, C, 1, 1]
        if flatten:
            nodes.append(oh.make_node("Flatten", ["p"], ["y"], name="flat"))
            y_shape = [1, C]
    else:
        nodes[-1].output[0] = "y"
        y_shape = shape
    outs = [oh.make_tensor_value_info("y", TP.INT8, y_shape)]
    if expose is not None:
        outs.append(oh.make_tensor_value_info(f"c{expose}_out", TP.INT8, shape))
    g = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", TP.INT8, shape)], outs, inits)
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m


def maxpool(
    shape: tuple[int, ...] = (1, 3, 7, 7),
    dtype: str = "uint8",
    *,
    indices: bool = False,
    opset: int = 17,
    **attrs,
) -> onnx.ModelProto:
    """x `shape` -> MaxPool 'mp' (`attrs`: kernel_shape, strides, pads, ...) -> y (and the
    Indices output `idx` as a graph output with `indices`)."""
    et = TPS[dtype]
    outs = ["y", "idx"] if indices else ["y"]
    node = oh.make_node("MaxPool", ["x"], outs, name="mp", **attrs)
    g = oh.make_graph(
        [node],
        "mp",
        [oh.make_tensor_value_info("x", et, list(shape))],
        [oh.make_tensor_value_info("y", et, None)]
        + ([oh.make_tensor_value_info("idx", TP.INT64, None)] if indices else []),
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def qconcat(
    shapes: tuple[tuple[int, ...], ...] = ((1, 3, 4, 5), (1, 2, 4, 5)),
    params: tuple[tuple[float, int], ...] = ((0.02, 3), (0.05, -7)),
    y: tuple[float, int] = (0.03, 1),
    *,
    axis: int = 1,
    dtype: str = "int8",
) -> onnx.ModelProto:
    """Inputs x0, x1, ... (`shapes`, each with its (scale, zero point)) -> com.microsoft
    QLinearConcat 'cat' along `axis` with output (scale, zero point) `y` -> y."""
    et, nt = TPS[dtype], NP[dtype]
    inits = [_c("ys", y[0], np.float32), _c("yz", y[1], nt)]
    ins, vis = ["ys", "yz"], []
    for i, (shape, (s, z)) in enumerate(zip(shapes, params, strict=True)):
        inits += [_c(f"s{i}", s, np.float32), _c(f"z{i}", z, nt)]
        ins += [f"x{i}", f"s{i}", f"z{i}"]
        vis.append(oh.make_tensor_value_info(f"x{i}", et, list(shape)))
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    node = oh.make_node("QLinearConcat", ins, ["y"], domain="com.microsoft", axis=axis, name="cat")
    g = oh.make_graph([node], "cat", vis, [oh.make_tensor_value_info("y", et, out)], inits)
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m


def fire(C: int = 4, spatial: tuple[int, int] = (5, 6), seed: int = 0) -> onnx.ModelProto:
    """A SqueezeNet fire module: int8 x -> 1x1 'sq' -> (1x1 'e1', 3x3 'e3', each with its
    own output scale) -> QLinearConcat 'cat' (another scale) -> 1x1 'out' -> y."""
    rng = np.random.default_rng(seed)
    inits = [
        _c("s", 0.02, np.float32), _c("z", 1, np.int8), _c("ws", 0.01, np.float32),
        _c("wz", 0, np.int8), _c("s1", 0.031, np.float32), _c("z1", -5, np.int8),
        _c("s3", 0.047, np.float32), _c("z3", 9, np.int8),
    ]  # fmt: skip

    def conv(name, x, c_in, c_out, k, out_s, out_z):
        inits.append(_c(f"W{name}", rng.integers(-127, 128, size=(c_out, c_in, k, k)), np.int8))
        pads = {"pads": [1, 1, 1, 1]} if k == 3 else {}
        return oh.make_node(
            "QLinearConv", [x, *x_q[x], f"W{name}", "ws", "wz", out_s, out_z], [name],
            name=name, kernel_shape=[k, k], **pads,
        )  # fmt: skip

    x_q = {"x": ("s", "z"), "sq": ("s", "z"), "e1": ("s1", "z1"), "e3": ("s3", "z3")}
    x_q["cat"] = ("s", "z")
    nodes = [
        conv("sq", "x", C, C, 1, "s", "z"),
        conv("e1", "sq", C, C, 1, "s1", "z1"),
        conv("e3", "sq", C, C, 3, "s3", "z3"),
        oh.make_node(
            "QLinearConcat", ["s", "z", "e1", "s1", "z1", "e3", "s3", "z3"], ["cat"],
            domain="com.microsoft", axis=1, name="cat",
        ),
        conv("y", "cat", 2 * C, C, 1, "s", "z"),
    ]  # fmt: skip
    shape = [1, C, *spatial]
    g = oh.make_graph(
        nodes,
        "fire",
        [oh.make_tensor_value_info("x", TP.INT8, shape)],
        [oh.make_tensor_value_info("y", TP.INT8, shape)],
        inits,
    )
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m
