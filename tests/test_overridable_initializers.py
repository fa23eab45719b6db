"""Initializers listed in graph.input: overridable from IR version 4 on (ONNX Runtime feeds
them at run time and never treats them as constants), constants below it.

An op that needs such a value constant (weights, scales, zero points, Clip bounds) stays
on the host, where ONNX Runtime runs it with whatever the caller feeds; the fused site it
would have formed is never 'proven'.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_helpers import assert_one_line_error, assert_run_equals_ort, npuc, prover
from models import matmul_activation
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from qdq_models import qdq_table_model

from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir

MESSAGE = ("initializer 'W' is overridable", "graph.input", "keep_initializers_as_inputs=False")


def listed(m: onnx.ModelProto, names, ir_version: int | None = None) -> onnx.ModelProto:
    """`m` with initializers `names` also listed in graph.input (and `ir_version` set)."""
    c = onnx.ModelProto()
    c.CopyFrom(m)
    for name in names:
        t = next(i for i in c.graph.initializer if i.name == name)
        c.graph.input.append(oh.make_tensor_value_info(name, t.data_type, list(t.dims)))
    if ir_version is not None:
        c.ir_version = ir_version
    onnx.checker.check_model(c)
    return c


def check(tmp_path, m: onnx.ModelProto, name: str = "m") -> dict:
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off", "--format", "json")
    assert r.returncode in (0, 1, 3), r.stderr
    return json.loads(r.stdout)


def host_messages(report: dict) -> dict[str, str]:
    return {
        h["nodes"][0]: h["message"]
        for h in report.get("host_ops", [])
        if h["code"] == "unsupported_op"
    }


def ort_session(m: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def base() -> onnx.ModelProto:
    """x -> QLinearMatMul mm (W) -> QLinearSigmoid act: one proven matmul+sigmoid site."""
    return matmul_activation()


def test_weights_listed_as_input_stay_on_the_host(tmp_path, base):
    rep = check(tmp_path, listed(base, ["W"]))
    assert rep["summary"]["proven"] == 0 and rep["summary"]["candidates"] == 0, rep["summary"]
    msg = host_messages(rep)["mm"]
    for needle in MESSAGE:
        assert needle in msg, msg
    assert f"IR version {base.ir_version}" in msg


def test_control_weights_not_listed_are_proven(tmp_path, base):
    rep = check(tmp_path, base)
    assert rep["summary"]["candidates"] == 1 and rep["summary"]["proven"] == 1, rep["summary"]
    assert not host_messages(rep)


def test_ort_treats_listed_initializers_as_overridable_from_ir4_only(base):
    """The fact the frontend follows, measured on the installed ONNX Runtime."""
    x = np.arange(-16, 16, dtype=np.int8).reshape(2, 16)
    W = np.full((16, 8), 3, dtype=np.int8)
    s4 = ort_session(listed(base, ["W"]))
    assert [i.name for i in s4.get_overridable_initializers()] == ["W"]
    assert not np.array_equal(s4.run(None, {"x": x})[0], s4.run(None, {"x": x, "W": W})[0])
    every = [i.name for i in base.graph.initializer]
    s3 = ort_session(listed(base, every, ir_version=3))
    assert not s3.get_overridable_initializers()
    with pytest.raises(Exception, match="Invalid input name: W"):
        s3.run(None, {"x": x, "W": W})


def test_ir3_lists_every_initializer_and_they_are_constants(tmp_path, base):
    """IR 3 required every initializer in graph.input; ONNX Runtime holds them constant
    (opset 17 with IR 3 is accepted by the checker and by ONNX Runtime 1.32)."""
    every = [i.name for i in base.graph.initializer]
    rep = check(tmp_path, listed(base, every, ir_version=3))
    assert rep["summary"]["candidates"] == 1 and rep["summary"]["proven"] == 1, rep["summary"]
    assert not host_messages(rep)


@pytest.mark.parametrize(
    "names, node",
    [(["y_s"], "mm"), (["w_z"], "mm"), (["act_os"], "act")],
    ids=["y_scale", "w_zero_point", "sigmoid_out_scale"],
)
def test_scales_and_zero_points_listed_as_inputs(tmp_path, base, names, node):
    rep = check(tmp_path, listed(base, names))
    assert rep["summary"]["proven"] == 0, rep["summary"]
    msg = host_messages(rep)[node]
    assert f"initializer '{names[0]}' is overridable" in msg, msg


def test_integer_clip_bound_listed_as_input_is_hosted(tmp_path):
    m = matmul_activation(clip=(-100, 100))
    assert check(tmp_path, m)["summary"]["proven"] == 1  # control
    rep = check(tmp_path, listed(m, ["c_lo"]), "clip")
    assert rep["summary"]["proven"] == 0, rep["summary"]
    assert "initializer 'c_lo' is overridable" in host_messages(rep)["clip"]


def test_reshape_to_an_overridable_shape_is_a_clear_error(tmp_path):
    path = tmp_path / "reshape.onnx"
    onnx.save(listed(matmul_activation(reshape="unit"), ["shape"]), path)
    r = prover("check", path, "--proofs-mode", "off")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert "initializer 'shape' is overridable" in r.stderr, r.stderr


def qdq_matmul_sigmoid() -> onnx.ModelProto:
    """uint8 x, int8 W: DQ -> MatMul -> Q -> QLinearSigmoid (ORT's default level makes the
    group a QLinearMatMul)."""
    rng = np.random.default_rng(3)
    inits = [
        nh.from_array(rng.integers(-127, 128, (16, 8)).astype(np.int8), "W"),
        nh.from_array(np.array(0.01, np.float32), "ws"),
        nh.from_array(np.array(0, np.int8), "wz"),
        nh.from_array(np.array(0.02, np.float32), "xs"),
        nh.from_array(np.array(128, np.uint8), "xz"),
        nh.from_array(np.array(0.05, np.float32), "ys"),
        nh.from_array(np.array(128, np.uint8), "yz"),
        nh.from_array(np.array(1 / 256, np.float32), "os"),
        nh.from_array(np.array(0, np.uint8), "oz"),
    ]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xd"], name="dq_x"),
        oh.make_node("DequantizeLinear", ["W", "ws", "wz"], ["wd"], name="dq_w"),
        oh.make_node("MatMul", ["xd", "wd"], ["mf"], name="mm"),
        oh.make_node("QuantizeLinear", ["mf", "ys", "yz"], ["h"], name="q"),
        oh.make_node(
            "QLinearSigmoid",
            ["h", "ys", "yz", "os", "oz"],
            ["y"],
            name="act",
            domain="com.microsoft",
        ),
    ]
    g = oh.make_graph(
        nodes,
        "qdq",
        [oh.make_tensor_value_info("x", TP.UINT8, [2, 16])],
        [oh.make_tensor_value_info("y", TP.UINT8, [2, 8])],
        inits,
    )
    ops = [oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    m = oh.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m


def test_qdq_group_with_overridable_weights(tmp_path):
    """The integer QDQ reading (ORT's rewrite, which keeps W a graph input) agrees."""
    m = qdq_matmul_sigmoid()
    ctl = check(tmp_path, m, "ctl")
    assert ctl["summary"]["proven"] == 1, ctl["summary"]
    rep = check(tmp_path, listed(m, ["W"]), "qdq")
    assert rep["summary"]["proven"] == 0, rep["summary"]
    assert "initializer 'W' is overridable" in host_messages(rep)["mm"]


def test_npuc_run_takes_the_overridable_weights(tmp_path, base):
    """The program takes W at run time, as ONNX Runtime does: fed a different W, npuc run
    equals ORT fed the same W. The program format has no default inputs, so without W
    npuc run exits 2 naming it; `npuc inputs --from` writes the model's default."""
    m = listed(base, ["W"])
    model = tmp_path / "m.onnx"
    onnx.save(m, model)
    prog = tmp_path / "m.npuprog"
    c = npuc("compile", model, "-o", prog, "--proofs-mode", "off")
    assert c.returncode == 0, c.stderr
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (2, 16)).astype(np.int8)
    W = rng.integers(-127, 128, (16, 8)).astype(np.int8)
    fed = {"x": x, "W": W}
    np.savez(tmp_path / "in.npz", **fed)
    assert_run_equals_ort(prog, tmp_path / "in.npz", model, fed, tmp_path / "out.npz")
    default = ort_session(m).run(None, {"x": x})[0]
    with np.load(tmp_path / "out.npz") as got:
        assert not np.array_equal(got["y"], default)  # the fed W mattered

    np.savez(tmp_path / "x_only.npz", x=x)
    r = npuc("run", prog, "--input", tmp_path / "x_only.npz", "-o", tmp_path / "o2.npz")
    assert_one_line_error(r, "missing input 'W'")

    np.savez(tmp_path / "float.npz", x=np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16))
    made = npuc("inputs", model, "--from", tmp_path / "float.npz", "-o", tmp_path / "in2.npz")
    assert made.returncode == 0 and "W: int8 [16, 8] the model's default value" in made.stdout
    with np.load(tmp_path / "in2.npz") as d:
        inputs = dict(d)
    np.testing.assert_array_equal(inputs["W"], nh.to_array(m.graph.initializer[0]))
    assert_run_equals_ort(prog, tmp_path / "in2.npz", model, inputs, tmp_path / "out2.npz")


@pytest.mark.parametrize("name", ["xs", "ys"])
def test_qdq_activation_group_with_an_overridable_scale(tmp_path, name):
    """float32 scales: ORT's integer reading (a QLinearSigmoid) stays on the host."""
    rep = check(tmp_path, listed(qdq_table_model(), [name]), "act")
    assert rep["summary"]["proven"] == 0, rep["summary"]
    assert f"initializer '{name}' is overridable" in host_messages(rep)["act"]


def test_overridable_float16_scale_runs_on_the_host(tmp_path):
    """A float16 run-time input is a host value (issue 24): the group it scales runs on the
    host, reported as `unsupported_op` naming the initializer and the fix."""
    path = tmp_path / "f16.onnx"
    onnx.save(listed(qdq_table_model(scale_type="float16"), ["ys"]), path)
    r = prover("check", path, "--proofs-mode", "off")
    assert r.returncode == 0, r.stderr
    assert "[unsupported_op]" in r.stdout and "initializer 'ys' is overridable" in r.stdout


def _reduce_sum_over_rows(overridable: bool) -> onnx.ModelProto:
    """x[N, 4] -> ReduceSum(axes = [1] as an initializer) -> y[N, 1]."""
    axes = nh.from_array(np.array([1], np.int64), "axes")
    ins = [oh.make_tensor_value_info("x", TP.FLOAT, ["N", 4])]
    if overridable:
        ins.append(oh.make_tensor_value_info("axes", TP.INT64, [1]))
    g = oh.make_graph(
        [oh.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, name="rs")],
        "g",
        ins,
        [oh.make_tensor_value_info("y", TP.FLOAT, ["N", 1])],
        [axes],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_batch_axes_from_an_overridable_initializer_may_be_any_axis():
    """A caller may feed axes = [0] (summing across rows): the dynamic batch is refused."""
    g, _ = to_ir(_reduce_sum_over_rows(overridable=False))
    assert g.dynamic_batch == ("x",)
    # its output shape follows the fed axes: refused, naming the batch or the initializer
    with pytest.raises(FrontendError, match="batch|overridable initializer 'axes'"):
        to_ir(_reduce_sum_over_rows(overridable=True))
