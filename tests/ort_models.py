"""Small single-node ONNX models for conformance tests, run with ONNX Runtime (optimizations off)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
MS_DOMAIN = "com.microsoft"

ELEM = {
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "int16": TensorProto.INT16,
    "uint16": TensorProto.UINT16,
    "int32": TensorProto.INT32,
    "float32": TensorProto.FLOAT,
}


def _init(name: str, value: Any, dtype: str) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _model(nodes, inputs, outputs, inits, ms: bool = False) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if ms:
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 10
    return m.SerializeToString()


def session(model: bytes) -> ort.InferenceSession:
    """An ONNX Runtime CPU session with every graph optimization disabled."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # expected failures raise; keep the test log clean
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    sess.model_bytes = model  # for comparisons with onnx.reference
    return sess


def _vi(name: str, dtype: str, shape) -> Any:
    return helper.make_tensor_value_info(name, ELEM[dtype], shape)


def quantize_linear(shape, scale, zp, out: str, axis: int | None = None) -> ort.InferenceSession:
    """QuantizeLinear(x: float32[shape]) with constant scale/zero point (scalar or per-axis)."""
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    inits = [_init("s", scale, "float32"), _init("z", zp, out)]
    return session(_model([node], [_vi("x", "float32", shape)], [_vi("y", out, shape)], inits))


def dequantize_linear(shape, scale, zp, dtype: str, axis: int | None = None):
    """DequantizeLinear(x: dtype[shape]) with constant scale/zero point (scalar or per-axis)."""
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    inits = [_init("s", scale, "float32"), _init("z", zp, dtype)]
    return session(_model([node], [_vi("x", dtype, shape)], [_vi("y", "float32", shape)], inits))


def qlinear_matmul(a_type, b, a_scale, a_zp, b_scale, b_zp, y_scale, y_zp, y_type, m: int):
    """QLinearMatMul(a: a_type[m, K]) with constant weights `b` [K, N] and quantization params."""
    k, n = b.shape
    b_type = str(np.asarray(b).dtype)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    inits = [
        _init("as", a_scale, "float32"),
        _init("az", a_zp, a_type),
        _init("b", b, b_type),
        _init("bs", b_scale, "float32"),
        _init("bz", b_zp, b_type),
        _init("ys", y_scale, "float32"),
        _init("yz", y_zp, y_type),
    ]
    return session(_model([node], [_vi("a", a_type, [m, k])], [_vi("y", y_type, [m, n])], inits))


def matmul_integer(a_type, b, a_zp, b_zp, m: int):
    """MatMulInteger(a: a_type[m, K]) with constant weights `b` [K, N] and zero points."""
    k, n = b.shape
    b_type = str(np.asarray(b).dtype)
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    inits = [_init("b", b, b_type), _init("az", a_zp, a_type), _init("bz", b_zp, b_type)]
    return session(_model([node], [_vi("a", a_type, [m, k])], [_vi("y", "int32", [m, n])], inits))


def qlinear_lookup(op: str, dtype: str, **attrs):
    """com.microsoft QLinearSigmoid / QLinearLeakyRelu over x: dtype[256] with scales as inputs.

    The scales and zero points are graph inputs (not constants), so one session
    serves every (scale, zero point) pair: ONNX Runtime then builds the table per run.
    """
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS_DOMAIN, **attrs)
    inputs = [
        _vi("x", dtype, [256]),
        _vi("xs", "float32", []),
        _vi("xz", dtype, []),
        _vi("ys", "float32", []),
        _vi("yz", dtype, []),
    ]
    return session(_model([node], inputs, [_vi("y", dtype, [256])], [], ms=True))


def run_lookup(sess, dtype: str, xs: float, xz: int, ys: float, yz: int) -> np.ndarray:
    """All 256 outputs of a lookup op, in logical order (input type min .. max), as int64."""
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    feeds = {
        "x": x,
        "xs": np.asarray(xs, np.float32),
        "xz": np.asarray(xz, dtype),
        "ys": np.asarray(ys, np.float32),
        "yz": np.asarray(yz, dtype),
    }
    return sess.run(None, feeds)[0].astype(np.int64)
