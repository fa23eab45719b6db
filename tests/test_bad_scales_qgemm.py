"""A zero, negative or non-finite scale on com.microsoft QGemm / QLinearAdd / QLinearMul is
bad input (exit 2, one line naming the node and the scale input), as on QLinearMatMul.

They were kept on the host with an `unsupported_op` diagnostic instead, and the check
went on to exit 0. A scale no reading makes meaningful is bad even where the op's form
has no NPU reading (QGemm transA=1, QLinearAdd of two dynamic operands).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_helpers import assert_one_line_error, npuc, prover
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir

OK = {"a": 0.1, "b": 0.05, "y": 0.2}
# the ONNX input names of each op's three scales (a, b, y) and the node's name
SCALE_INPUTS = {
    "QGemm": ("a_scale", "b_scale", "y_scale"),
    "QLinearAdd": ("A_scale", "B_scale", "C_scale"),
    "QLinearMul": ("A_scale", "B_scale", "C_scale"),
    "QLinearMatMul": ("a_scale", "b_scale", "y_scale"),
}
BAD = [0.0, -0.05, float("nan"), float("inf"), -float("inf")]


def _model(
    op: str, scales: dict[str, float], *, trans_a: bool = False, dynamic_b: bool = False
) -> onnx.ModelProto:
    """x[2, 4] int8 -> op -> o (int8); initializers s_a, s_b, s_y hold the scales."""

    def init(name, v, dt):
        return nh.from_array(np.asarray(v, dtype=dt), name)

    n_b = (3,) if op in ("QGemm", "QLinearMatMul") else ()
    inits = [
        init("s_a", scales["a"], np.float32),
        init("z_a", 0, np.int8),
        init("s_b", np.full(n_b, scales["b"]), np.float32),  # per column for the matmuls
        init("z_b", np.zeros(n_b), np.int8),
        init("s_y", scales["y"], np.float32),
        init("z_y", 0, np.int8),
    ]
    inputs = [oh.make_tensor_value_info("x", TP.INT8, [4, 2] if trans_a else [2, 4])]
    ms = {"domain": "com.microsoft"}
    if op in ("QGemm", "QLinearMatMul"):
        if dynamic_b:
            inputs.append(oh.make_tensor_value_info("W", TP.INT8, [4, 3]))
        else:
            inits.append(init("W", np.arange(12).reshape(4, 3) % 5 - 2, np.int8))
        ins = ["x", "s_a", "z_a", "W", "s_b", "z_b"]
        if op == "QGemm":
            attrs = {"transA": 1} if trans_a else {}
            node = oh.make_node(op, [*ins, "", "s_y", "z_y"], ["o"], name="n", **ms, **attrs)
        else:
            node = oh.make_node(op, [*ins, "s_y", "z_y"], ["o"], name="n")
        out = [2, 3]
    else:
        if dynamic_b:
            inputs.append(oh.make_tensor_value_info("b", TP.INT8, [2, 4]))
        else:
            inits.append(init("b", [1, -2, 3, 4], np.int8))
        ins = ["x", "s_a", "z_a", "b", "s_b", "z_b", "s_y", "z_y"]
        node = oh.make_node(op, ins, ["o"], name="n", **ms)
        out = [2, 4]
    g = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info("o", TP.INT8, out)], inits)
    opsets = [oh.make_opsetid("", 20), oh.make_opsetid("com.microsoft", 1)]
    m = oh.make_model(g, opset_imports=opsets)
    m.ir_version = 10
    return m


def _needles(op: str, which: str, value: float) -> tuple[str, ...]:
    name = SCALE_INPUTS[op]["aby".index(which)]
    return (f"node 'n' ({op})", f"{name} 's_{which}'", str(value), "finite and positive")


@pytest.mark.parametrize("op", ["QGemm", "QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("which", ["a", "b", "y"])
@pytest.mark.parametrize("value", BAD, ids=str)
def test_bad_scale_is_bad_input_in_the_library(op, which, value):
    m = _model(op, {**OK, which: value})
    with pytest.raises(FrontendError) as e:
        to_ir(m)
    assert getattr(e.value, "bad_input", False)
    for needle in _needles(op, which, value):
        assert needle in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("op", ["QGemm", "QLinearAdd", "QLinearMul", "QLinearMatMul"])
def test_good_scales_are_read(op):
    """The control: the same models with valid scales are read (nothing refused)."""
    g, _ = to_ir(_model(op, OK))
    assert any("n" in node.origin for node in g.nodes)


def _conv3d(y_scale: float) -> onnx.ModelProto:
    """QLinearConv over 3 spatial axes (no NPU form: the host runs it) named 'n'."""
    f32, i8 = np.float32, np.int8
    inits = [
        nh.from_array(np.asarray(v, dtype=t), name)
        for name, v, t in [
            ("s_a", 0.1, f32), ("z_a", 0, i8), ("W", np.ones((2, 3, 3, 3, 1)), i8),
            ("s_b", 0.05, f32), ("z_b", 0, i8), ("s_y", y_scale, f32), ("z_y", 0, i8),
        ]
    ]  # fmt: skip
    ins = ["x", "s_a", "z_a", "W", "s_b", "z_b", "s_y", "z_y"]
    g = oh.make_graph(
        [oh.make_node("QLinearConv", ins, ["o"], name="n")],
        "g",
        [oh.make_tensor_value_info("x", TP.INT8, [1, 3, 4, 4, 2])],
        [oh.make_tensor_value_info("o", TP.INT8, [1, 2, 2, 2, 2])],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize(
    "op,kw",
    [
        ("QGemm", {"trans_a": True}),
        ("QLinearAdd", {"dynamic_b": True}),
        ("QLinearMatMul", {"dynamic_b": True}),
        ("QLinearConv", {}),
    ],
)
def test_bad_scale_is_bad_input_on_a_form_the_host_runs(op, kw):
    """With valid scales this form is kept on the host (a QLinearAdd of two activations is
    the NPU's `eltwise` op instead); a zero scale is still bad input."""

    def build(scales):
        return _conv3d(scales["y"]) if op == "QLinearConv" else _model(op, scales, **kw)

    g, _ = to_ir(build(OK))
    hosted = [x for x in g.nodes if x.op == "host_onnx"]
    if op == "QLinearAdd":
        assert [x.op for x in g.nodes] == ["eltwise"]
    else:
        assert hosted and "placement" in hosted[0].attrs
    with pytest.raises(FrontendError, match=r"node 'n' .*'s_y' holds 0\.0") as e:
        to_ir(build({**OK, "y": 0.0}))
    assert getattr(e.value, "bad_input", False)


@pytest.mark.parametrize(
    "op,which,value",
    [
        ("QGemm", "y", 0.0),
        ("QGemm", "b", -0.05),
        ("QLinearAdd", "y", float("nan")),
        ("QLinearMul", "a", float("inf")),
        ("QLinearMatMul", "y", 0.0),  # the reference behaviour the others now share
    ],
)
def test_bad_scale_cli_exit_2_one_line(tmp_path, op, which, value):
    p = tmp_path / "m.onnx"
    onnx.save(_model(op, {**OK, which: value}), str(p))
    r = prover("check", p, "--proofs-mode", "off", "--no-progress")
    assert_one_line_error(r, *_needles(op, which, value))
    assert not r.stdout.strip()


def test_bad_scale_npuc_exit_2_one_line(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_model("QGemm", {**OK, "a": 0.0}), str(p))
    r = npuc("compile", p, "-o", tmp_path / "p.npuprog", "--proofs-mode", "off")
    assert_one_line_error(r, *_needles("QGemm", "a", 0.0))
    assert not (tmp_path / "p.npuprog").exists()
