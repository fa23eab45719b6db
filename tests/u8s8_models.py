"""uint8 x int8 quantized models (ONNX Runtime's usual QOperator configuration)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper


def _c(name: str, value, dtype: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def qlinear_matmul_sigmoid(
    w: np.ndarray,
    *,
    m: int = 2,
    a_scale: float = 0.02,
    a_zp: int = 128,
    w_scale: float = 0.01,
    y_scale: float | None = None,
    y_zp: int = 128,
    sigmoid: bool = True,
) -> onnx.ModelProto:
    """`x: uint8[m, K] -> QLinearMatMul(int8 W[K, N]) -> uint8 [-> QLinearSigmoid] -> y`."""
    w = np.asarray(w, dtype=np.int8)
    k, n = w.shape
    if y_scale is None:  # spread the exact accumulator range over the uint8 outputs
        span = 255.0 * float(np.abs(w.astype(np.int64)).sum(axis=0).max())
        y_scale = span * a_scale * w_scale / 256.0
    inits = [
        _c("a_s", a_scale, "float32"),
        _c("a_zp", a_zp, "uint8"),
        _c("w", w, "int8"),
        _c("w_s", w_scale, "float32"),
        _c("w_zp", 0, "int8"),
        _c("y_s", y_scale, "float32"),
        _c("y_zp", y_zp, "uint8"),
    ]
    mm_out = "mm" if sigmoid else "y"
    nodes = [
        oh.make_node(
            "QLinearMatMul",
            ["x", "a_s", "a_zp", "w", "w_s", "w_zp", "y_s", "y_zp"],
            [mm_out],
            name="mm_quant",
        )
    ]
    opsets = [oh.make_opsetid("", 21)]
    if sigmoid:
        inits += [_c("o_s", 1 / 256, "float32"), _c("o_zp", 0, "uint8")]
        nodes.append(
            oh.make_node(
                "QLinearSigmoid",
                ["mm", "y_s", "y_zp", "o_s", "o_zp"],
                ["y"],
                name="sig_quant",
                domain="com.microsoft",
            )
        )
        opsets.append(oh.make_opsetid("com.microsoft", 1))
    g = oh.make_graph(
        nodes,
        "u8s8",
        [oh.make_tensor_value_info("x", TP.UINT8, [m, k])],
        [oh.make_tensor_value_info("y", TP.UINT8, [m, n])],
        inits,
    )
    model = oh.make_model(g, opset_imports=opsets)
    model.ir_version = 10
    return model


def saturable_weights(k: int = 16, n: int = 4, seed: int = 0) -> np.ndarray:
    """int8 weights with large same-sign pairs (some pair can leave int16)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (k, n))
    w[0:2, 0] = (110, 100)
    w[4:6, 1] = (-120, -90)
    return w.astype(np.int8)


def seven_bit_weights(k: int = 16, n: int = 4, seed: int = 0) -> np.ndarray:
    """reduce_range-like weights in [-64, 63]: no pair can leave int16."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-64, 64, (k, n))
    w[0:2, 0] = (63, 63)
    w[4:6, 1] = (-64, -64)
    return w.astype(np.int8)
