"""Shared pieces of the tests that run compiled programs on the simulator against ORT.

`io_model` builds a one-input (`x`), one-output (`y`) model in the default domain;
`dq_float_matmul` is the host float MatMul whose weight is dequantized at run time
(ORT's float results for it depend on the batch); `corrupt_npu_results` is the
negative control that turns every NPU instruction's result off by one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

Shape = Sequence[int | str]


def io_model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    x: tuple[int, Shape],
    y: tuple[int, Shape],
    *,
    opset: int = 17,
    ir_version: int = 8,
    name: str = "g",
) -> onnx.ModelProto:
    """The model x -> `nodes` -> y; `x`, `y`: (TensorProto element type, shape)."""
    g = oh.make_graph(
        nodes,
        name,
        [oh.make_tensor_value_info("x", x[0], list(x[1]))],
        [oh.make_tensor_value_info("y", y[0], list(y[1]))],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m


def dq_float_matmul(batch: int | str = "N", k: int = 16, n: int = 8) -> onnx.ModelProto:
    """int8 x[batch, k] -> DequantizeLinear -> MatMul(DequantizeLinear(W)) -> float y.

    ORT does not rewrite it to an integer kernel, so every op is a host float step."""
    rng = np.random.default_rng(1)
    inits = [
        nh.from_array(rng.integers(-128, 128, size=(k, n)).astype(np.int8), "W"),
        nh.from_array(np.float32(0.01), "ws"),
        nh.from_array(np.int8(0), "wz"),
        nh.from_array(np.float32(0.02), "xs"),
        nh.from_array(np.int8(3), "xz"),
    ]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx"),
        oh.make_node("DequantizeLinear", ["W", "ws", "wz"], ["wf"], name="dqw"),
        oh.make_node("MatMul", ["xf", "wf"], ["y"], name="mm"),
    ]
    return io_model(nodes, inits, (TP.INT8, [batch, k]), (TP.FLOAT, [batch, n]))


def corrupt_npu_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: every result an NPU instruction writes to SRAM is off by one
    (+1, or -1 at the type's maximum)."""
    from npu_backend import simulator

    real_put = simulator.Machine.put

    def corrupt(self, name, values, dtype, who):
        v = np.asarray(values, dtype=np.int64)
        info = np.iinfo(np.dtype(dtype))
        return real_put(self, name, np.where(v < info.max, v + 1, v - 1), dtype, who)

    monkeypatch.setattr(simulator.Machine, "put", corrupt)
