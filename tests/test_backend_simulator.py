"""Simulator: bit-exact against the kernel, against ONNX Runtime, and with host steps."""

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_backend_support import K, fused_post, matmul_model, requant_post, x_input

from npu_backend.codegen import generate
from npu_backend.isa import HostCall
from npu_backend.lowered import (
    HostKernel,
    HostOnnx,
    LoweredModel,
    LutParams,
    NpuClip,
    NpuMatMul,
    NpuRequant,
    PostProcess,
    TensorSpec,
)
from npu_backend.simulator import SimulatorError, run
from npu_backend.target import load_target, onnx_requant_params
from prover.domain import NUMPY
from prover.inttypes import INT8
from prover.matmul import matmul_acc
from prover.requant import requant_double, requant_float_concrete
from prover.terms import Var, op

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _ref(model, x):
    st = model.steps[0]
    acc = matmul_acc(x, model.constants["w"], st.a_zp, st.w_zp, model.constants["b"])
    return acc


@pytest.mark.parametrize("target", [FLOAT, FIXED], ids=["float", "fixed"])
@pytest.mark.parametrize("kind", ["raw", "requant", "fused", "fused_clip"])
def test_matmul_matches_kernel_reference(target, kind):
    post = {
        "raw": None,
        "requant": requant_post(target),
        "fused": fused_post(target),
        "fused_clip": fused_post(target, clip=(-60, 40)),
    }[kind]
    model = matmul_model(post)
    x = x_input()["x"]
    out, c = run(generate(model, target), {"x": x})
    acc = _ref(model, x)
    if post is None:
        want = acc
    else:
        rq = post.requant
        if rq.scheme == "float32":
            q = requant_float_concrete(acc, np.float32(rq.scale), rq.zp, INT8)
        else:
            q = requant_double(NUMPY, acc, rq.multiplier, rq.shift, rq.zp, INT8)
        if post.clip:
            q = np.clip(q, *post.clip)
        want = q
        if post.lut is not None:
            idx = q + 128 if post.lut.index_order == "offset" else q & 255
            want = np.asarray(post.lut.table)[idx]
    assert out["y"].dtype == (np.int32 if post is None else np.int8)
    assert np.array_equal(out["y"], want)
    assert c.instructions == len(generate(model, target).instructions)
    assert c.bytes_written["sram"] == x.nbytes + out["y"].nbytes  # DMA of x, then y


def test_per_channel_requant_and_weight_zero_points():
    posts = tuple(requant_post(FLOAT, scale=0.001 * (j + 1), zp=j - 4) for j in range(8))
    model = matmul_model(posts)
    wzp = tuple(range(-4, 4))
    model.steps[0] = dataclasses.replace(model.steps[0], w_zp=wzp)
    x = x_input()["x"]
    out, _ = run(generate(model, FLOAT), {"x": x})
    acc = matmul_acc(x, model.constants["w"], 3, np.asarray(wzp), model.constants["b"])
    scales = np.asarray([p.requant.scale for p in posts], dtype=np.float32)
    zps = np.asarray([p.requant.zp for p in posts])
    assert np.array_equal(out["y"], requant_float_concrete(acc, scales, zps, INT8))


def test_standalone_requant_clip_and_host_kernel():
    rq = requant_post(FLOAT, scale=0.01, zp=1).requant
    base = matmul_model(None)
    steps = [
        dataclasses.replace(base.steps[0], out="acc"),
        NpuRequant("rq", "acc", "q", rq),
        NpuClip("cl", "q", "c", -20, 30, "int8"),
        HostKernel("hk", ("c", "q"), "s", op("add", Var("c"), Var("q")), "int16"),
    ]
    w, b = base.constants["w"], base.constants["b"]
    model = LoweredModel(base.inputs, ["s", "acc"], base.constants, steps)
    prog = generate(model, FLOAT)
    x = x_input()["x"]
    out, c = run(prog, {"x": x})
    acc = matmul_acc(x, w, 3, 0, b)
    q = requant_float_concrete(acc, np.float32(rq.scale), 1, INT8)
    assert np.array_equal(out["acc"], acc)
    assert out["s"].dtype == np.int16
    assert np.array_equal(out["s"], np.clip(q, -20, 30) + q)
    assert c.host_calls == 1 and c.by_opcode["HostCall"] == 1


def test_bad_inputs_rejected():
    prog = generate(matmul_model(fused_post(FLOAT)), FLOAT)
    with pytest.raises(SimulatorError, match="missing input"):
        run(prog, {})
    with pytest.raises(SimulatorError, match="shape"):
        run(prog, {"x": np.zeros((2, K), np.int8)})
    with pytest.raises(SimulatorError, match="outside int8"):
        run(prog, {"x": np.full((4, K), 300, np.int16)})
    with pytest.raises(SimulatorError, match="unknown input"):
        run(prog, {**x_input(), "z": np.zeros(1)})


# --- ONNX Runtime ------------------------------------------------------------------------


def _model_bytes(nodes, inputs, outputs, inits, ms=False):
    opsets = [helper.make_opsetid("", 21)] + (
        [helper.make_opsetid("com.microsoft", 1)] if ms else []
    )
    m = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=opsets
    )
    m.ir_version = 10
    return m.SerializeToString()


def _session(model):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _init(name, v, dt):
    return numpy_helper.from_array(np.asarray(v, dtype=dt), name)


XS, XZ, WS, WZ, YS, YZ, OS, OZ = 0.05, 3, 0.02, 0, 0.4, -5, 1 / 256, -128


def _qlinear_model(w, sigmoid):
    nodes = [
        helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    ]
    inits = [
        _init("xs", XS, "float32"), _init("xz", XZ, "int8"), _init("w", w, "int8"),
        _init("ws", WS, "float32"), _init("wz", WZ, "int8"), _init("ys", YS, "float32"),
        _init("yz", YZ, "int8"), _init("os", OS, "float32"), _init("oz", OZ, "int8"),
    ]  # fmt: skip
    out = "y"
    if sigmoid:
        nodes.append(
            helper.make_node("QLinearSigmoid", ["y", "ys", "yz", "os", "oz"], ["z"],
                             domain="com.microsoft")
        )  # fmt: skip
        out = "z"
    x = helper.make_tensor_value_info("x", TensorProto.INT8, [None, K])
    o = helper.make_tensor_value_info(out, TensorProto.INT8, None)
    return _model_bytes(nodes, [x], [o], inits, ms=sigmoid), out


def _ort_sigmoid_table():
    """QLinearSigmoid's table, taken from ONNX Runtime itself (offset order)."""
    x = helper.make_tensor_value_info("y", TensorProto.INT8, [256])
    o = helper.make_tensor_value_info("z", TensorProto.INT8, [256])
    node = helper.make_node("QLinearSigmoid", ["y", "ys", "yz", "os", "oz"], ["z"],
                            domain="com.microsoft")  # fmt: skip
    inits = [_init("ys", YS, "float32"), _init("yz", YZ, "int8"),
             _init("os", OS, "float32"), _init("oz", OZ, "int8")]  # fmt: skip
    sess = _session(_model_bytes([node], [x], [o], inits, ms=True))
    return sess.run(None, {"y": np.arange(-128, 128, dtype=np.int8)})[0].astype(int)


def _inputs(rng, m):
    rand = rng.integers(-128, 128, (m, K)).astype(np.int8)
    edges = np.array([[-128] * K, [127] * K, [XZ] * K, [-128, 127] * (K // 2)], np.int8)
    return np.concatenate([rand, edges])


def _lowered(w, target, sigmoid):
    scheme = target.compute("MatMul").requant_scheme
    rq = onnx_requant_params(XS, WS, YS, YZ, "int8", scheme)
    post = PostProcess(rq)
    if sigmoid:
        table = _ort_sigmoid_table()
        if target.lut_builder.index_order == "twos_complement":
            table = np.roll(table, -128)  # index x & 0xFF
        lut = LutParams(
            tuple(int(v) for v in table), "int8", "int8", target.lut_builder.index_order
        )
        post = PostProcess(rq, function="sigmoid", lut=lut, out_zp=OZ)
    step = NpuMatMul(name="mm", a="x", w="w", out="y", a_zp=XZ, w_zp=WZ, bias=None, a_type="int8", w_type="int8", post=post,
                     onnx_nodes=("QLinearMatMul", "QLinearSigmoid"))  # fmt: skip
    return LoweredModel([TensorSpec("x", "int8", (68, K))], ["y"], {"w": w}, [step])


@pytest.mark.parametrize("sigmoid", [False, True], ids=["matmul", "matmul_sigmoid"])
def test_float_target_bit_exact_to_onnx_runtime(rng, sigmoid):
    w = rng.integers(-128, 128, (K, 8)).astype(np.int8)
    model, out_name = _qlinear_model(w, sigmoid)
    x = _inputs(rng, 64)
    want = _session(model).run([out_name], {"x": x})[0]
    got, _ = run(generate(_lowered(w, FLOAT, sigmoid), FLOAT), {"x": x})
    assert np.array_equal(got["y"], want)


def test_fixed_target_within_one_step_of_onnx_runtime(rng):
    w = rng.integers(-128, 128, (K, 8)).astype(np.int8)
    model, out_name = _qlinear_model(w, False)
    x = _inputs(rng, 64)
    want = _session(model).run([out_name], {"x": x})[0].astype(int)
    got, _ = run(generate(_lowered(w, FIXED, False), FIXED), {"x": x})
    assert np.abs(got["y"].astype(int) - want).max() <= 1


def test_host_onnx_float_matmul_then_npu_activation(rng):
    """A QDQ-style float MatMul + QuantizeLinear stays on the host (ONNX Runtime); a LUT follows."""
    wf = rng.standard_normal((3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["xf", "wf"], ["yf"]),
        helper.make_node("QuantizeLinear", ["yf", "s", "z"], ["q"]),
    ]
    inits = [_init("wf", wf, "float32"), _init("s", 0.05, "float32"), _init("z", 0, "int8")]
    sub = _model_bytes(
        nodes,
        [helper.make_tensor_value_info("xf", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("q", TensorProto.INT8, [2, 4])],
        inits,
    )
    lut = fused_post(FLOAT).lut
    steps = [
        HostOnnx("host", sub, ("xf",), ("q",), (TensorSpec("q", "int8", (2, 4)),), ("MatMul",)),
        NpuLut_("act", "q", "out", lut),
    ]
    model = LoweredModel([TensorSpec("xf", "float32", (2, 3))], ["out", "q"], {}, steps)
    prog = generate(model, FLOAT)
    assert isinstance(prog.instructions[0], HostCall)
    xf = (rng.standard_normal((2, 3)) * 3).astype(np.float32)
    out, c = run(prog, {"xf": xf})
    q = _session(sub).run(None, {"xf": xf})[0]
    assert np.array_equal(out["q"], q)
    assert np.array_equal(out["out"], np.asarray(lut.table)[q.astype(int) + 128])
    assert c.host_calls == 1 and c.bytes_read["dram"] >= xf.nbytes
    with pytest.raises(SimulatorError, match="float32"):
        run(prog, {"xf": xf.astype(np.float64)})


def NpuLut_(name, x, out, lut):  # noqa: N802 - a small constructor helper
    from npu_backend.lowered import NpuLut

    return NpuLut.from_params(name, x, out, lut, "sigmoid")


def test_execute_reports_each_instruction_to_its_hook():
    """The public per-instruction hook: costs in program order, counters so far, live peaks."""
    from npu_backend.simulator import execute

    prog = generate(matmul_model(fused_post(FLOAT)), FLOAT)
    seen = []
    trace = execute(prog, x_input(), on_step=lambda cost, c: seen.append((cost, c.instructions)))
    assert [c.index for c, _ in seen] == list(range(len(prog.instructions)))
    assert [n for _, n in seen] == list(range(1, len(prog.instructions) + 1))
    assert [c.opcode for c, _ in seen] == [type(i).__name__ for i in prog.instructions]
    for mem, peak in trace.counters.peak_bytes.items():
        assert peak == max(c.live_bytes[mem] for c, _ in seen)
    outs, counters = run(prog, x_input())
    np.testing.assert_array_equal(outs["y"], trace.outputs["y"])
    assert counters.to_json() == trace.counters.to_json()
    assert "y" in trace.memory["dram"]
