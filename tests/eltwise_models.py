"""Small models with a com.microsoft QLinearAdd / QLinearMul of two activations."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ELEM = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def eltwise_model(
    op: str = "QLinearAdd",
    dtype: str = "uint8",
    a_shape: tuple[int, ...] = (1, 8, 5, 5),
    b_shape: tuple[int, ...] = (1, 8, 5, 5),
    *,
    scales: tuple[float, float, float] = (0.02, 0.031, 0.04),
    zps: tuple[int, int, int] = (128, 120, 130),
    activation: str | None = None,
    residual_conv: bool = False,
    extra_user: bool = False,
) -> onnx.ModelProto:
    """a, b -> op 'elt' -> c [-> QLinearSigmoid 'act' -> y].

    `residual_conv`: b is not an input but a 1x1 QLinearConv of a (a residual block's add:
    conv(a) + a). `extra_user`: c is also a graph output (the activation has a sibling).
    """
    t = ELEM[dtype]
    npd = np.dtype(dtype)
    inits = []

    def const(name: str, v, dt) -> str:
        inits.append(numpy_helper.from_array(np.array(v, dtype=dt), name))
        return name

    sa, sb, sc = (const(n, s, np.float32) for n, s in zip(("as", "bs", "cs"), scales, strict=True))
    za, zb, zc = (const(n, z, npd) for n, z in zip(("az", "bz", "cz"), zps, strict=True))
    nodes = []
    inputs = [helper.make_tensor_value_info("a", t, list(a_shape))]
    if residual_conv:
        b_shape = a_shape
        c_in = a_shape[1]
        w = np.random.default_rng(1).integers(-20, 21, (c_in, c_in, 1, 1)).astype(np.int8)
        inits.append(numpy_helper.from_array(w, "w"))
        conv_in = ["a", sa, za, "w", const("ws", 0.01, np.float32), const("wz", 0, np.int8)]
        nodes.append(helper.make_node("QLinearConv", [*conv_in, sb, zb], ["b"], name="conv"))
    else:
        inputs.append(helper.make_tensor_value_info("b", t, list(b_shape)))
    out_shape = list(np.broadcast_shapes(a_shape, b_shape))
    names = ["a", sa, za, "b", sb, zb, sc, zc]
    nodes.append(helper.make_node(op, names, ["c"], domain="com.microsoft", name="elt"))
    outputs = []
    if activation == "Sigmoid":
        ys = const("ys", 1 / 256, np.float32)
        yz = const("yz", 0 if dtype == "uint8" else -128, npd)
        nodes.append(
            helper.make_node(
                "QLinearSigmoid", ["c", sc, zc, ys, yz], ["y"], domain="com.microsoft", name="act"
            )
        )
        outputs.append(helper.make_tensor_value_info("y", t, out_shape))
    if activation == "Sigmoid2":  # two tables in a row
        ys = const("ys", 1 / 256, np.float32)
        yz = const("yz", 0 if dtype == "uint8" else -128, npd)
        nodes += [
            helper.make_node(
                "QLinearSigmoid", ["c", sc, zc, ys, yz], ["s"], domain="com.microsoft", name="act"
            ),
            helper.make_node(
                "QLinearSigmoid", ["s", ys, yz, ys, yz], ["y"], domain="com.microsoft", name="act2"
            ),
        ]
        outputs.append(helper.make_tensor_value_info("y", t, out_shape))
    if activation in ("HardSwish", "Relu"):  # a QDQ island: a unary region after the op
        ys = const("ys", 1 / 64, np.float32)
        yz = const("yz", 0 if dtype == "uint8" else -128, npd)
        nodes += [
            helper.make_node("DequantizeLinear", ["c", sc, zc], ["f"], name="dq"),
            helper.make_node(activation, ["f"], ["g"], name="act"),
            helper.make_node("QuantizeLinear", ["g", ys, yz], ["y"], name="q"),
        ]
        outputs.append(helper.make_tensor_value_info("y", t, out_shape))
    if activation is None or extra_user:
        outputs.append(helper.make_tensor_value_info("c", t, out_shape))
    g = helper.make_graph(nodes, "eltwise", inputs, outputs, inits)
    if not any(o.name == "c" for o in outputs):  # its type, as quant_pre_process records it
        g.value_info.append(helper.make_tensor_value_info("c", t, out_shape))
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m


def random_inputs(m: onnx.ModelProto, seed: int, extremes: bool = False) -> dict[str, np.ndarray]:
    """Random 8-bit values for every graph input (`extremes`: only the type's ends and 0)."""
    rng = np.random.default_rng(seed)
    feed = {}
    for i in m.graph.input:
        dt = np.uint8 if i.type.tensor_type.elem_type == TensorProto.UINT8 else np.int8
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        info = np.iinfo(dt)
        if extremes:
            feed[i.name] = rng.choice([info.min, 0, info.max], shape).astype(dt)
        else:
            feed[i.name] = rng.integers(info.min, info.max + 1, shape).astype(dt)
    return feed
