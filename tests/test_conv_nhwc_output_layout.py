"""A pointwise QLinearConv whose NHWC output has its NCHW shape is transposed back.

Found by bench/fuzz_review.py (family conv, seed 61, model 2): the NPU computes a
pointwise conv as a matmul over channels and writes NHWC; `compiler.ir.npu_step.
place_matmul` gave that result its own buffer and a host transpose back to NCHW only when
the two *shapes* differed. With C_out = H = W (e.g. [N, 3, 3, 3]) they coincide, so the
NHWC data was handed on as the NCHW output: `prover check` said "proven" for
conv+sigmoid (exit 0) and `npuc run` returned 24 of 27 elements transposed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from compiler.api import compile_model
from npu_backend.codegen import generate
from npu_backend.runner import run_batched
from npu_backend.target import load_target

TARGETS = Path(__file__).resolve().parents[1] / "npu_backend" / "targets"
MS = "com.microsoft"


def _c(name, value, dtype):
    return nh.from_array(np.asarray(value, dtype=dtype), name)


def _conv(c_in: int, c_out: int, h: int, w: int, sigmoid: bool) -> onnx.ModelProto:
    weights = np.resize(np.array([61, 26, -128, 90, -7], np.int8), c_out * c_in)
    inits = [
        _c("W", weights.reshape(c_out, c_in, 1, 1), np.int8),
        _c("a_s", 0.02, np.float32),
        _c("a_z", 33, np.uint8),
        _c("w_s", 0.005, np.float32),
        _c("w_z", 0, np.int8),
        _c("y_s", 0.03, np.float32),
        _c("y_z", 128, np.uint8),
    ]
    ins = ["x", "a_s", "a_z", "W", "w_s", "w_z", "y_s", "y_z"]
    nodes = [oh.make_node("QLinearConv", ins, ["cv" if sigmoid else "y"], name="conv")]
    if sigmoid:
        inits += [
            _c("is", 0.03, np.float32),
            _c("iz", 128, np.uint8),
            _c("os", 1 / 256, np.float32),
            _c("oz", 0, np.uint8),
        ]
        sig_ins = ["cv", "is", "iz", "os", "oz"]
        nodes.append(oh.make_node("QLinearSigmoid", sig_ins, ["y"], name="sig", domain=MS))
    g = oh.make_graph(
        nodes,
        "conv",
        [oh.make_tensor_value_info("x", TP.UINT8, ["N", c_in, h, w])],
        [oh.make_tensor_value_info("y", TP.UINT8, ["N", c_out, h, w])],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def _run(model: onnx.ModelProto, x: np.ndarray):
    target = load_target(TARGETS / "npu_float.toml")
    # the host's ORT is the reference (an AVX2-only CPU saturates u8s8 pairs)
    r = compile_model(model, "bitwise", target, proofs_mode="off", reference="ort-host")
    got, _ = run_batched(generate(r.lowered, target), {"x": x})
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return r, got["y"], sess.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    "shape",
    [(1, 3, 3, 3), (2, 2, 2, 2), (1, 3, 2, 3), (3, 1, 2, 2), (2, 4, 1, 1)],
    ids=["c3h3w3", "c2h2w2", "c3h2w3", "c1h2w2", "c4h1w1"],
)
@pytest.mark.parametrize("sigmoid", [True, False], ids=["fused_sigmoid", "conv_only"])
def test_pointwise_conv_output_layout_equals_ort(shape, sigmoid):
    c_in, c_out, h, w = shape
    x = np.random.default_rng(0).integers(0, 256, size=(5, c_in, h, w)).astype(np.uint8)
    r, got, want = _run(_conv(c_in, c_out, h, w, sigmoid), x)
    if sigmoid:  # the fused site is proven: the claim the output is checked against
        assert [str(s.verdict) for s in r.sites] == ["proven"]
    assert any(type(s).__name__ == "NpuMatMul" for s in r.lowered.steps)
    assert got.shape == want.shape
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {got.size} differ"


def test_nhwc_output_gets_a_transpose_even_when_shapes_coincide():
    r, _, _ = _run(_conv(1, 3, 3, 3, True), np.zeros((1, 1, 3, 3), np.uint8))
    names = [type(s).__name__ for s in r.lowered.steps]
    # NCHW -> NHWC before, NHWC -> NCHW after (NPU gathers: the target moves data)
    assert names == ["NpuMove", "NpuMatMul", "NpuMove"], names
    assert [s.strides for s in r.lowered.steps if type(s).__name__ == "NpuMove"][1] == (
        27,
        1,
        9,
        3,
    )  # out[n, c, h, w] reads the NHWC result at c + 3 w + 9 h, not a reshape's c*9 + ...
