"""A window conv whose fused chain ends reshaped (conv -> Reshape dropping the leading unit
dim -> Sigmoid): the NPU writes the conv's own channels-last shape, taken from its input
and window, then the layout move and the reshape; the chain's reshaped result is not the
conv's natural output (fuzz seed 7: a crash, then a wrong output shape)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

from compiler.api import compile_model
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import NpuMatMul
from npu_backend.target import load_target

FLOAT = load_target("npu_backend/targets/npu_float.toml")


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = rng.integers(-60, 60, size=(3, 3, 3)).astype(np.int8)  # C_out, C_in, k
    c = lambda n, v, t: nh.from_array(np.asarray(v, dtype=t), n)  # noqa: E731
    inits = [
        c("xs", 0.05, np.float32), c("xz", 3, np.int8), c("w", w, np.int8),
        c("ws", 0.02, np.float32), c("wz", 0, np.int8), c("cs", 0.04, np.float32),
        c("cz", -5, np.int8), c("shape", [3, 8], np.int64), c("ys", 1 / 256, np.float32),
        c("yz", -128, np.int8),
    ]  # fmt: skip
    nodes = [
        oh.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "cs", "cz"],
            ["c"],
            pads=[1, 1],
            name="conv",
        ),  # fmt: skip
        oh.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
        oh.make_node(
            "QLinearSigmoid",
            ["r", "cs", "cz", "ys", "yz"],
            ["y"],
            name="sig",
            domain="com.microsoft",
        ),  # fmt: skip
    ]
    g = oh.make_graph(
        nodes, "conv_reshape_sigmoid",
        [oh.make_tensor_value_info("x", TensorProto.INT8, [1, 3, 8])],
        [oh.make_tensor_value_info("y", TensorProto.INT8, [3, 8])], inits,
    )  # fmt: skip
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    return m


def test_fused_chain_ending_reshaped_writes_the_convs_own_shape():
    m = _model()
    r = compile_model(m, "bitwise", FLOAT, reference="ort-host")
    (conv,) = [s for s in r.lowered.steps if isinstance(s, NpuMatMul)]
    assert conv.window is not None
    prog = codegen.generate(r.lowered, FLOAT)
    sess = session(m, level="default")
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, size=(1, 3, 8)).astype(np.int8)
        want = sess.run(None, {"x": x})[0]
        got = simulator.run(prog, {"x": x})[0]["y"]
        assert got.shape == want.shape == (3, 8)
        np.testing.assert_array_equal(want, got)
