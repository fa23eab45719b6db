"""The integer QDQ reading of a model that also holds the project's own ops.

ONNX Runtime cannot load such a model, so the reading used to fall back silently to the
float one (a host float MatMul) while the report said "QDQ groups read as ORT's
default-level integer kernels", and the program then differed by 1 from the reference
(the fuzzer's finding 13). The project ops are now cut out, ORT rewrites the rest, and
they are put back.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh

from compiler.frontend.qdq_reading import integer_reading
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from prover.reference import PROFILES
from tests.models import const, requantize_node, weights

K, N = 64, 4


def qdq_matmul(with_requantize: bool) -> onnx.ModelProto:
    """x uint8 -> DQ -> MatMul(DQ(W int8)) -> Q uint8 -> [project Requantize] -> y."""
    w = weights(K, N, seed=3)
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dq_x"),
        oh.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="dq_w"),
        oh.make_node("MatMul", ["xf", "wf"], ["mf"], name="mm"),
        oh.make_node("QuantizeLinear", ["mf", "ys", "yz"], ["mm_out"], name="q_mm"),
    ]
    out = "mm_out"
    if with_requantize:
        nodes.append(
            requantize_node("mm_out", "y", multiplier=1 << 30, shift=-1, output_type="uint8")
        )
        out = "y"
    inits = [
        const("xs", 0.02, "float32"),
        const("xz", 128, "uint8"),
        const("w", w, "int8"),
        const("ws", 0.01, "float32"),
        const("wz", 0, "int8"),
        const("ys", 0.37, "float32"),
        const("yz", 120, "uint8"),
    ]
    opsets = [oh.make_opsetid("", 21)]
    if with_requantize:
        opsets.append(oh.make_opsetid("ai.npufusion", 1))
    g = oh.make_graph(
        nodes,
        "qdq_project",
        [oh.make_tensor_value_info("x", TensorProto.UINT8, [3, K])],
        [oh.make_tensor_value_info(out, TensorProto.UINT8, [3, N])],
        inits,
    )
    m = oh.make_model(g, opset_imports=opsets)
    m.ir_version = 10
    return m


def ort_default(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def test_project_ops_are_spliced_back_into_ort_rewrite() -> None:
    m = qdq_matmul(with_requantize=True)
    r = integer_reading(m)
    ops = [n.op_type for n in r.graph.node]
    assert "QLinearMatMul" in ops, ops
    assert ops[-1] == "Requantize" and [o.name for o in r.graph.output] == ["y"]
    assert [i.name for i in r.graph.input] == ["x"]


@pytest.mark.parametrize("seed", [0, 1])
def test_integer_reading_with_project_op_equals_ort_default_level(seed: int) -> None:
    x = np.random.default_rng(seed).integers(0, 256, size=(3, K)).astype(np.uint8)
    x[0] = 255  # the extreme row reaches the far ends of the accumulator
    expected = ort_default(qdq_matmul(with_requantize=False), x)
    g, _ = to_ir(qdq_matmul(with_requantize=True), reference=PROFILES["onnx"])
    assert [n.op for n in g.nodes][0] == "matmul"  # an integer matmul, not a host float op
    env = run_graph(g, {"x": x}, keep_all=True)
    np.testing.assert_array_equal(env["mm_out"], expected)


def test_float_reading_keeps_the_host_float_matmul() -> None:
    g, _ = to_ir(qdq_matmul(with_requantize=True), reference=PROFILES["onnx-qdq-float"])
    assert g.nodes[0].op == "host_onnx"
