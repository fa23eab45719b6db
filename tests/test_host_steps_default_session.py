"""Host steps compute what ONNX Runtime's default session computes (issue 28, items 1-2).

ORT's default session rewrites float subgraphs before running them (layer-norm fusion,
quantization of a QDQ float Conv's float weights, NCHWc layouts for float convs), and the
rewrite changes rounding. The frontend reads the graph ORT's default session runs for the
whole model (`compiler.frontend.qdq_reading.integer_reading`) and partitions that, so every
host step runs ORT's kernels on ORT's values. Each case compares `npuc run` with the default
session on the same inputs; the structural checks say which rewrite the program carries.
"""

from __future__ import annotations

import os

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

TARGET = os.path.join(os.path.dirname(__file__), "..", "npu_backend/targets/npu_float.toml")


def _c(name: str, a) -> onnx.TensorProto:
    return nh.from_array(np.asarray(a), name)


def _model(nodes, inits, x, y, ms: bool = False) -> onnx.ModelProto:
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", x[0], x[1])],
        [oh.make_tensor_value_info("y", y[0], y[1])],
        inits,
    )
    ops = [oh.make_opsetid("", 17)] + ([oh.make_opsetid("com.microsoft", 1)] if ms else [])
    m = oh.make_model(g, opset_imports=ops)
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _layer_norm(x: str, out: str) -> list[onnx.NodeProto]:
    """A layer norm over the last axis written out as ops (`two`, `eps`, `gamma`, `beta`
    initializers), as exporters write it."""
    mk = oh.make_node
    return [
        mk("ReduceMean", [x], ["mu"], axes=[-1], name="rm1"),
        mk("Sub", [x, "mu"], ["d"], name="sub"),
        mk("Pow", ["d", "two"], ["d2"], name="pow"),
        mk("ReduceMean", ["d2"], ["var"], axes=[-1], name="rm2"),
        mk("Add", ["var", "eps"], ["ve"], name="add_eps"),
        mk("Sqrt", ["ve"], ["sd"], name="sqrt"),
        mk("Div", ["d", "sd"], ["nrm"], name="div"),
        mk("Mul", ["nrm", "gamma"], ["g"], name="mul"),
        mk("Add", ["g", "beta"], [out], name="add_b"),
    ]


def layer_norm_after_qlinear_matmul(rows: int = 256, k: int = 16, n: int = 64) -> onnx.ModelProto:
    """X int8 -> QLinearMatMul -> DequantizeLinear -> layer norm written out as ops ->
    QuantizeLinear (ORT's default session fuses the norm: SimplifiedLayerNormalization)."""
    rng = np.random.default_rng(0)
    inits = [
        _c("W", rng.integers(-60, 60, size=(k, n)).astype(np.int8)),
        _c("xs", np.float32(0.05)),
        _c("xz", np.int8(0)),
        _c("ws", np.float32(0.02)),
        _c("wz", np.int8(0)),
        _c("ys", np.float32(0.0137)),
        _c("yz", np.int8(0)),
        _c("two", np.float32(2.0)),
        _c("eps", np.float32(1e-5)),
        _c("gamma", rng.normal(size=n).astype(np.float32)),
        _c("beta", rng.normal(size=n).astype(np.float32)),
        _c("os", np.float32(0.011)),
        _c("oz", np.int8(0)),
    ]
    mk = oh.make_node
    nodes = [
        mk("QLinearMatMul", ["x", "xs", "xz", "W", "ws", "wz", "ys", "yz"], ["q"], name="mm"),
        mk("DequantizeLinear", ["q", "ys", "yz"], ["f"], name="dq"),
        *_layer_norm("f", "b"),
        mk("QuantizeLinear", ["b", "os", "oz"], ["y"], name="q_out"),
    ]
    return _model(nodes, inits, (TP.INT8, [rows, k]), (TP.INT8, [rows, n]))


def float_layer_norm_before_qlinear_matmul(rows: int = 256, n: int = 64) -> onnx.ModelProto:
    """float x -> layer norm written out as ops -> QuantizeLinear -> QLinearMatMul -> y: no
    QDQ group at all, and still a float subgraph ORT's default session rewrites."""
    rng = np.random.default_rng(4)
    inits = [
        _c("two", np.float32(2.0)),
        _c("eps", np.float32(1e-5)),
        _c("gamma", rng.normal(size=n).astype(np.float32)),
        _c("beta", rng.normal(size=n).astype(np.float32)),
        _c("qs", np.float32(0.013)),
        _c("qz", np.int8(0)),
        _c("W", rng.integers(-60, 60, size=(n, 16)).astype(np.int8)),
        _c("ws", np.float32(0.02)),
        _c("wz", np.int8(0)),
        _c("ys", np.float32(0.05)),
        _c("yz", np.int8(0)),
    ]
    mk = oh.make_node
    nodes = [
        *_layer_norm("x", "b"),
        mk("QuantizeLinear", ["b", "qs", "qz"], ["q"], name="q_in"),
        mk("QLinearMatMul", ["q", "qs", "qz", "W", "ws", "wz", "ys", "yz"], ["y"], name="mm"),
    ]
    return _model(nodes, inits, (TP.FLOAT, [rows, n]), (TP.INT8, [rows, 16]))


def qdq_float_conv(front: str = "dq", c: int = 8, hw: int = 10) -> onnx.ModelProto:
    """DequantizeLinear -> float Conv (float weights and bias) -> QuantizeLinear; ORT's
    default session quantizes the float weights (no integer kernel). `front="sigmoid"` puts
    a fusable QLinearMatMul -> QLinearSigmoid in front of it (a proven, fused site)."""
    rng = np.random.default_rng(1)
    inits = [
        _c("xs", np.float32(0.05)),
        _c("xz", np.int8(0)),
        _c("Wf", (rng.normal(size=(16, c, 3, 3)) * 0.2).astype(np.float32)),
        _c("Bf", (rng.normal(size=16) * 0.1).astype(np.float32)),
        _c("os", np.float32(0.08)),
        _c("oz", np.int8(0)),
    ]
    mk = oh.make_node
    nodes = []
    src = "x"
    if front == "sigmoid":
        inits += [
            _c("Wm", rng.integers(-50, 50, size=(hw, hw)).astype(np.int8)),
            _c("ms", np.float32(0.01)),
            _c("mz", np.int8(0)),
            _c("as", np.float32(0.04)),
            _c("az", np.int8(0)),
            _c("ss", np.float32(1.0 / 256)),
            _c("sz", np.int8(-128)),
        ]
        nodes += [
            mk("QLinearMatMul", ["x", "xs", "xz", "Wm", "ms", "mz", "as", "az"], ["a"], name="mm"),
            mk(
                "QLinearSigmoid",
                ["a", "as", "az", "ss", "sz"],
                ["s"],
                name="sig",
                domain="com.microsoft",
            ),
        ]
        src = "s"
    scale, zp = ("ss", "sz") if front == "sigmoid" else ("xs", "xz")
    nodes += [
        mk("DequantizeLinear", [src, scale, zp], ["xf"], name="dq"),
        mk("Conv", ["xf", "Wf", "Bf"], ["cf"], pads=[1, 1, 1, 1], name="conv"),
        mk("QuantizeLinear", ["cf", "os", "oz"], ["y"], name="q"),
    ]
    x, y = (TP.INT8, [1, c, hw, hw]), (TP.INT8, [1, 16, hw, hw])
    return _model(nodes, inits, x, y, ms=front == "sigmoid")


def float_conv(c: int = 32, hw: int = 14) -> onnx.ModelProto:
    """float x -> Conv -> Relu -> QuantizeLinear: ORT's default session runs the Conv in its
    NCHWc layout where the CPU has blocked kernels."""
    rng = np.random.default_rng(2)
    inits = [
        _c("W", (rng.normal(size=(32, c, 3, 3)) * 0.1).astype(np.float32)),
        _c("B", (rng.normal(size=32) * 0.1).astype(np.float32)),
        _c("s", np.float32(0.02)),
        _c("z", np.int8(0)),
    ]
    mk = oh.make_node
    nodes = [
        mk("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        mk("Relu", ["c"], ["r"], name="relu"),
        mk("QuantizeLinear", ["r", "s", "z"], ["y"], name="q"),
    ]
    return _model(nodes, inits, (TP.FLOAT, [1, c, hw, hw]), (TP.INT8, [1, 32, hw, hw]))


def _session(m: onnx.ModelProto, level) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 4
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _feeds(m: onnx.ModelProto, seed: int = 3) -> dict[str, np.ndarray]:
    vi = m.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    if vi.type.tensor_type.elem_type == TP.FLOAT:
        return {vi.name: rng.normal(size=shape).astype(np.float32)}
    return {vi.name: rng.integers(-128, 128, size=shape).astype(np.int8)}


def _compiled(m: onnx.ModelProto):
    target = load_target(TARGET)
    r = compile_model(m, "bitwise", target, proofs_mode="off")
    return r, generate(r.lowered, target)


def _host_ops(r) -> set[tuple[str, str]]:
    """(domain, op type) of every ONNX node the program's host steps run."""
    out = set()
    for n in r.graph.nodes:
        if n.op == "host_onnx":
            for b in n.attrs["nodes"]:
                p = onnx.NodeProto.FromString(b)
                out.add((p.domain or "", p.op_type))
    return out


def _program_vs_default(m: onnx.ModelProto) -> tuple[int, int, int]:
    """(program != default session, default session != optimisations off, outputs)."""
    _, program = _compiled(m)
    feeds = _feeds(m)
    got, _ = run_batched(program, feeds)
    want = _session(m, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feeds)[0]
    off = _session(m, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feeds)[0]
    assert got["y"].shape == want.shape and got["y"].dtype == want.dtype
    return int((got["y"] != want).sum()), int((want != off).sum()), want.size


def test_layer_norm_host_step_is_the_fused_norm_ort_runs():
    m = layer_norm_after_qlinear_matmul()
    r, _ = _compiled(m)
    ops = _host_ops(r)
    assert ("", "SimplifiedLayerNormalization") in ops, ops
    assert ("", "Pow") not in ops and ("", "Sqrt") not in ops
    bad, _, size = _program_vs_default(m)
    assert bad == 0, f"{bad} of {size} outputs differ from ORT's default session"


def test_float_layer_norm_without_qdq_groups_is_the_fused_norm():
    m = float_layer_norm_before_qlinear_matmul()
    r, _ = _compiled(m)
    ops = {op for _, op in _host_ops(r)}
    assert ops & {"LayerNormalization", "SimplifiedLayerNormalization"} and "Pow" not in ops
    bad, _, size = _program_vs_default(m)
    assert bad == 0, f"{bad} of {size} outputs differ from ORT's default session"


def test_qdq_float_conv_uses_the_weights_ort_quantized():
    m = qdq_float_conv()
    bad, moved, size = _program_vs_default(m)
    assert moved > 0  # control: the rewrite changes the outputs, so the comparison can fail
    assert bad == 0, f"{bad} of {size} outputs differ from ORT's default session"


def test_qdq_float_conv_behind_a_fused_sigmoid_site():
    m = qdq_float_conv(front="sigmoid")
    r, _ = _compiled(m)
    assert r.summary["proven"] >= 1 and r.summary["refuted"] == 0
    bad, moved, size = _program_vs_default(m)
    assert moved > 0
    assert bad == 0, f"{bad} of {size} outputs differ from ORT's default session"


def test_float_conv_runs_in_the_layout_ort_chose():
    """ORT's default session runs a float Conv in its NCHWc layout where this CPU has blocked
    kernels (a CPU-dependent rewrite, so the frontend reads the CPU-independent graph and the
    host step runs at the default session's level, where ORT makes the same choice)."""
    m = float_conv()
    r, program = _compiled(m)
    conv_steps = [s for s in r.lowered.steps if "conv" in getattr(s, "onnx_nodes", ())]
    assert conv_steps and all(s.ort_level == "default" for s in conv_steps)
    bad, _, size = _program_vs_default(m)
    assert bad == 0, f"{bad} of {size} outputs differ from ORT's default session"


def test_identity_dq_q_pair_ort_removes_does_not_block_fusion():
    """DequantizeLinear -> QuantizeLinear with the same scale and zero point between a matmul
    and its Sigmoid: ORT's default session removes the pair, so the two are adjacent in the
    graph the reference runs and the fusion is proven (with an Abs between them it is not)."""
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from models import matmul_activation

    m = matmul_activation(float_roundtrip=True)
    nodes = [n for n in m.graph.node if n.name != "rt_abs"]
    for n in nodes:
        if n.name == "rt_q":
            n.input[0] = "rt_f"
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    r, _ = _compiled(m)
    assert [(s.verdict, s.pattern) for s in r.sites] == [("proven", "matmul+sigmoid")]
    blocked, _ = _compiled(matmul_activation(float_roundtrip=True))
    assert blocked.sites[0].reason.code == "not_adjacent"


@pytest.mark.parametrize("reference", ["onnx-qdq-float"])
def test_float_reference_keeps_the_graph_as_written(reference):
    """Under a float QDQ reference (ORT with optimisations off) the graph is not rewritten."""
    m = qdq_float_conv()
    target = load_target(TARGET)
    r = compile_model(m, "bitwise", target, proofs_mode="off", reference=reference)
    program = generate(r.lowered, target)
    feeds = _feeds(m)
    got, _ = run_batched(program, feeds)
    off = _session(m, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feeds)[0]
    assert int((got["y"] != off).sum()) == 0
