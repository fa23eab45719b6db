"""Activation tables taken from ONNX Runtime itself.

ONNX Runtime evaluates the logistic function its own way (see DESIGN.md: about 1
entry in 50,000 differs from a plain float sigmoid), so the meaning of a quantized
activation is the table ONNX Runtime computes: we run the operator on every value
of its 8-bit input type and read the table off. The prover package may not import
onnxruntime; the compiler may.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto
from onnx import helper as oh

from prover.inttypes import int_type

_ONNX_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}

# QLinear activations of the com.microsoft domain and their function kinds.
QLINEAR_FUNCTIONS = {"QLinearSigmoid": "sigmoid", "QLinearLeakyRelu": "leakyrelu"}
# Float activations recognised between DequantizeLinear and QuantizeLinear.
QDQ_FUNCTIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """An ONNX Runtime CPU session with graph optimisations off (the reference setting)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@lru_cache(maxsize=1024)
def ort_table(
    form: str,
    op_type: str,
    in_scale: float,
    in_zp: int,
    in_type: str,
    out_scale: float,
    out_zp: int,
    out_type: str,
    alpha: float | None = None,
) -> tuple[int, ...]:
    """The 256-entry table (offset index order) ONNX Runtime computes for one activation.

    `form` is `qlinear` (com.microsoft QLinear<Act>) or `qdq` (DequantizeLinear ->
    <Act> -> QuantizeLinear).
    """
    it, ot = int_type(in_type), int_type(out_type)
    xs = np.arange(it.min, it.max + 1, dtype=np.int64).astype(it.numpy_dtype())
    consts = [
        oh.make_tensor("xs", TensorProto.FLOAT, [], [np.float32(in_scale)]),
        oh.make_tensor("xz", _ONNX_TYPES[in_type], [], [in_zp]),
        oh.make_tensor("ys", TensorProto.FLOAT, [], [np.float32(out_scale)]),
        oh.make_tensor("yz", _ONNX_TYPES[out_type], [], [out_zp]),
    ]
    kw = {} if alpha is None else {"alpha": float(alpha)}
    opsets = [oh.make_opsetid("", 17)]
    if form == "qlinear":
        nodes = [
            oh.make_node(
                op_type, ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **kw
            )
        ]
        opsets.append(oh.make_opsetid("com.microsoft", 1))
    elif form == "qdq":
        nodes = [
            oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
            oh.make_node(op_type, ["f"], ["g"], **kw),
            oh.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"]),
        ]
    else:
        raise ValueError(f"unknown activation form {form!r}")
    g = oh.make_graph(
        nodes,
        "table",
        [oh.make_tensor_value_info("x", _ONNX_TYPES[in_type], [it.size])],
        [oh.make_tensor_value_info("y", _ONNX_TYPES[out_type], [it.size])],
        consts,
    )
    m = oh.make_model(g, opset_imports=opsets)
    (y,) = session(m).run(None, {"x": xs})
    table = tuple(int(v) for v in np.asarray(y, dtype=np.int64))
    if min(table) < ot.min or max(table) > ot.max:
        raise AssertionError("ONNX Runtime returned a table outside the output type")
    return table
