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
