"""The frontend interprets or rejects (by name) every attribute and type it meets (issue 10,
findings 3 and 6): QuantizeLinear/DequantizeLinear opsets 13..23, the integer ops, Constant."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_helpers import assert_one_line_error, prover
from models import OPSETS, const, make, weights
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from qdq_models import check_end_to_end, finish, ort_run, qdq_table_model

from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile

ALL_INT8 = {"x": np.arange(-128, 128, dtype=np.int8)}


def matmul_qdq_tanh(opset: int = 21, **q_attrs) -> onnx.ModelProto:
    """QLinearMatMul -> DequantizeLinear -> Tanh -> QuantizeLinear(no zero point, `q_attrs`)."""
    inits = [nh.from_array(weights(16, 3), "W")] + [
        nh.from_array(np.array(v, dtype=dt), n)
        for n, v, dt in [
            ("as", 0.02, np.float32),
            ("az", 0, np.int8),
            ("ws", 0.01, np.float32),
            ("wz", 0, np.int8),
            ("ys", 0.05, np.float32),
            ("yz", 0, np.int8),
            ("os", 1 / 100, np.float32),
        ]
    ]
    nodes = [
        oh.make_node(
            "QLinearMatMul", ["x", "as", "az", "W", "ws", "wz", "ys", "yz"], ["h"], name="mm"
        ),
        oh.make_node("DequantizeLinear", ["h", "ys", "yz"], ["d"], name="dq"),
        oh.make_node("Tanh", ["d"], ["s"], name="act"),
        oh.make_node("QuantizeLinear", ["s", "os"], ["y"], name="q", **q_attrs),
    ]
    out_t = q_attrs.get("output_dtype", TP.UINT8)
    return finish(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [4, 16])],
        [oh.make_tensor_value_info("y", out_t, [4, 3])],
        inits,
        opset,
    )


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(-128, 128, (4, 16)).astype(np.int8)}


# -- finding 3: QuantizeLinear-21 output_dtype ---------------------------------------------


def test_output_dtype_int8_without_zero_point_end_to_end(tmp_path):
    """Was: PROVEN, and the program returned uint8 [0, 0, 0] where ORT returns int8 < 0."""
    m = matmul_qdq_tanh(output_dtype=TP.INT8)
    feeds = _inputs()
    ref = ort_run(m, feeds)[0]
    assert ref.dtype == np.int8 and ref.min() < 0  # the case that was read as uint8
    got = check_end_to_end(m, feeds, tmp_path)
    assert got["y"].dtype == np.int8


_Q_ATTRS = [{}, {"output_dtype": TP.UINT8}, {"output_dtype": TP.INT8}]


@pytest.mark.parametrize(
    "opset, q_attrs",
    # output_dtype exists from opset 21: only valid combinations are generated
    [(o, a) for o in (13, 19, 21, 23) for a in _Q_ATTRS if o >= 21 or not a],
)
def test_qdq_table_opsets_and_output_dtype_equal_onnxruntime(opset, q_attrs):
    out_t = "int8" if q_attrs.get("output_dtype") == TP.INT8 else "uint8"
    attrs = dict(q_attrs)
    if opset >= 19:
        attrs["saturate"] = 1  # only meaningful for float8 outputs: ignored here
    m = qdq_table_model(
        "Tanh", x_scale=0.03, x_zp=3, y_scale=1 / 100, y_zp=None, out_type=out_t,
        opset=opset, q_attrs=attrs,
    )  # fmt: skip
    g, _ = to_ir(m, reference=host_profile())
    lut = next(n for n in g.nodes if n.op == "lut")
    assert lut.attrs["out_type"] == out_t
    np.testing.assert_array_equal(run_graph(g, ALL_INT8)["y"], ort_run(m, ALL_INT8)[0])


def test_output_dtype_with_matching_zero_point_is_accepted():
    m = qdq_table_model("Sigmoid", y_zp=-128, out_type="int8", q_attrs={"output_dtype": TP.INT8})
    g, _ = to_ir(m, reference=host_profile())
    np.testing.assert_array_equal(run_graph(g, ALL_INT8)["y"], ort_run(m, ALL_INT8)[0])


@pytest.mark.parametrize(
    "kw, needles",
    [
        (dict(q_attrs={"output_dtype": TP.INT16}), ["'q'", "output_dtype", "int16"]),
        (dict(q_attrs={"output_dtype": TP.UINT16}), ["'q'", "output_dtype", "uint16"]),
        (dict(q_attrs={"output_dtype": TP.INT4}), ["'q'", "output_dtype", "int4"]),
        (dict(q_attrs={"output_dtype": TP.UINT4}), ["'q'", "output_dtype", "uint4"]),
        (
            dict(q_attrs={"output_dtype": TP.FLOAT8E4M3FN, "saturate": 0}),
            ["'q'", "output_dtype", "FLOAT8E4M3FN"],
        ),
        (dict(scale_type="bfloat16"), ["'dq'", "x_scale", "bfloat16"]),
    ],
)
def test_unsupported_output_and_scale_types_are_rejected_by_name(kw, needles):
    m = qdq_table_model("Sigmoid", y_zp=None, out_type="uint8", **kw)
    with pytest.raises(FrontendError) as e:
        to_ir(m)
    for n in needles:
        assert n.lower() in str(e.value).lower(), (n, str(e.value))


def test_blocked_quantization_is_rejected_by_name():
    xs = oh.make_tensor("xs", TP.FLOAT, [2, 2], [0.05, 0.04, 0.03, 0.02])
    m = qdq_table_model("Sigmoid", shape=(2, 4), dq_attrs={"axis": 1, "block_size": 2})
    m.graph.initializer[0].CopyFrom(xs)
    onnx.checker.check_model(m, full_check=True)
    with pytest.raises(FrontendError, match="'dq'.*attribute 'block_size'"):
        to_ir(m)


def test_per_axis_scale_of_an_activation_is_rejected():
    m = qdq_table_model("Sigmoid", shape=(2, 4), dq_attrs={"axis": 0})
    m.graph.initializer[0].CopyFrom(oh.make_tensor("xs", TP.FLOAT, [2], [0.05, 0.04]))
    m.graph.initializer[1].CopyFrom(nh.from_array(np.zeros(2, np.int8), "xz"))
    onnx.checker.check_model(m, full_check=True)
    with pytest.raises(FrontendError, match="'dq'.*x_scale must be a scalar"):
        to_ir(m)


@pytest.mark.parametrize(
    "node_attrs, needle",
    [
        (dict(q_attrs={"precision": TP.FLOAT}), "'q'.*attribute 'precision' = FLOAT"),
        (dict(dq_attrs={"output_dtype": TP.FLOAT}), "'dq'.*attribute 'output_dtype' = FLOAT"),
    ],
)
def test_opset23_precision_and_dq_output_dtype_other_than_the_scale_type_are_rejected(
    node_attrs, needle
):
    m = qdq_table_model("Sigmoid", scale_type="float16", opset=23, **node_attrs)
    with pytest.raises(FrontendError, match=needle):
        to_ir(m)


def test_cli_rejects_unsupported_output_dtype_with_one_line(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(qdq_table_model(y_zp=None, out_type="uint8", q_attrs={"output_dtype": TP.INT16}), p)
    r = prover("check", p, "--proofs-mode", "off", "--no-progress")
    assert_one_line_error(r, "'q'", "output_dtype", "int16")


# -- integer ops: attributes and scale types ------------------------------------------------


def _qlinear_matmul(scale_type: str) -> onnx.ModelProto:
    st = {"float32": TP.FLOAT, "float16": TP.FLOAT16}[scale_type]
    inits = [nh.from_array(weights(16, 3), "W")]
    inits += [oh.make_tensor(n, st, [], [v]) for n, v in (("as", 0.02), ("ws", 0.01), ("ys", 0.05))]
    inits += [nh.from_array(np.array(0, np.int8), n) for n in ("az", "wz", "yz")]
    node = oh.make_node(
        "QLinearMatMul", ["x", "as", "az", "W", "ws", "wz", "ys", "yz"], ["y"], name="mm"
    )
    return finish(
        [node],
        [oh.make_tensor_value_info("x", TP.INT8, [2, 16])],
        [oh.make_tensor_value_info("y", TP.INT8, [2, 3])],
        inits,
        21,
    )


def test_qlinear_matmul_float16_scales_stay_on_the_host_named():
    to_ir(_qlinear_matmul("float32"))
    # ONNX Runtime runs it (opset 21), the NPU form does not model it: host, with the reason
    g, _ = to_ir(_qlinear_matmul("float16"))
    (mm,) = [n for n in g.nodes if n.origin == ("mm",)]
    assert mm.op == "host_onnx"
    assert "'mm'" in mm.attrs["placement"]
    assert "a_scale has type float16; supported: float32" in mm.attrs["placement"]


def _with_attr(op: str, attrs: dict, domain: str) -> onnx.ModelProto:
    """int8 x -> `op` with an attribute its handler does not interpret."""
    inits = [const("s", 0.05, "float32"), const("z", 0, "int8")]
    if op == "QLinearSigmoid":
        node = oh.make_node(op, ["x", "s", "z", "s", "z"], ["y"], name="n", domain=domain, **attrs)
    else:
        node = oh.make_node(
            op, ["x"], ["y"], name="n", domain=domain, multiplier=1 << 30, shift=1, **attrs
        )
    g = oh.make_graph(
        [node],
        "t",
        [oh.make_tensor_value_info("x", TP.INT8, [4])],
        [oh.make_tensor_value_info("y", TP.INT8, [4])],
        inits,
    )
    return oh.make_model(g, opset_imports=OPSETS)


@pytest.mark.parametrize(
    "op, domain", [("QLinearSigmoid", "com.microsoft"), ("Requantize", "ai.npufusion")]
)
def test_uninterpreted_attribute_of_a_custom_domain_op_is_rejected(op, domain):
    to_ir(_with_attr(op, {}, domain))  # accepted without the attribute
    with pytest.raises(FrontendError, match="node 'n' .*attribute 'round_mode' is not supported"):
        to_ir(_with_attr(op, {"round_mode": "up"}, domain))


def test_qlinear_conv_kernel_shape_attribute_is_interpreted():
    from models import conv_activation

    m = conv_activation()
    conv = next(n for n in m.graph.node if n.op_type == "QLinearConv")
    to_ir(m)
    conv.attribute.append(oh.make_attribute("kernel_shape", [1, 1]))
    to_ir(m)  # interpreted: pointwise


def test_qlinear_conv_kernel_shape_other_than_pointwise_stays_on_the_host():
    """[1, 1] is read as the integer kernel; a kernel_shape that disagrees with the 1x1
    weights keeps the conv on the host, saying why (the test above only checks no error)."""
    from models import conv_activation

    m = conv_activation()
    conv = next(n for n in m.graph.node if n.op_type == "QLinearConv")
    conv.attribute.append(oh.make_attribute("kernel_shape", [1, 1]))
    assert [n.op for n in to_ir(m)[0].nodes] == ["matmul", "lut"]
    conv.attribute[-1].CopyFrom(oh.make_attribute("kernel_shape", [3, 3]))
    first = to_ir(m)[0].nodes[0]
    assert first.op == "host_onnx" and first.attrs["onnx_op"] == "QLinearConv"
    assert "kernel_shape [3, 3] is not [1, 1]" in first.attrs["placement"]


# -- Constant: every value attribute (issue 10 finding 6: value_ints crashed) ----------------


def _reshape_after_matmul(constant: onnx.NodeProto) -> onnx.ModelProto:
    inits = [nh.from_array(weights(16, 4), "W")] + [
        const(n, v, t)
        for n, v, t in [("as", 0.02, "float32"), ("z", 0, "int8"), ("ws", 0.01, "float32"),
                        ("ys", 0.05, "float32"), ("os", 1 / 256, "float32"), ("oz", -128, "int8")]
    ]  # fmt: skip
    nodes = [
        oh.make_node(
            "QLinearMatMul", ["x", "as", "z", "W", "ws", "z", "ys", "z"], ["h"], name="mm"
        ),
        constant,
        oh.make_node("Reshape", ["h", "shape"], ["r"], name="reshape"),
        oh.make_node(
            "QLinearSigmoid",
            ["r", "ys", "z", "os", "oz"],
            ["y"],
            name="act",
            domain="com.microsoft",
        ),
    ]
    m = make(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [2, 16])],
        [oh.make_tensor_value_info("y", TP.INT8, [1, 2, 4])],
        inits,
        name="t",
        full_check=True,
    )
    return m


SHAPE = [1, 2, 4]
CONSTANTS = {
    "value": oh.make_node(
        "Constant", [], ["shape"], name="c", value=nh.from_array(np.array(SHAPE, np.int64))
    ),
    "value_ints": oh.make_node("Constant", [], ["shape"], name="c", value_ints=SHAPE),
    "sparse_value": oh.make_node(
        "Constant",
        [],
        ["shape"],
        name="c",
        sparse_value=oh.make_sparse_tensor(
            nh.from_array(np.array([1, 2, 4], np.int64), "v"),
            nh.from_array(np.array([0, 1, 2], np.int64), "i"),
            [3],
        ),
    ),
}


@pytest.mark.parametrize("kind", list(CONSTANTS))
def test_constant_value_attributes_end_to_end(kind, tmp_path):
    m = _reshape_after_matmul(CONSTANTS[kind])
    check_end_to_end(m, {"x": _inputs()["x"][:2]}, tmp_path)


def test_constant_scalars_and_sparse_coordinates_are_interpreted():
    from compiler.frontend.reader import _Builder

    b = _Builder(_reshape_after_matmul(CONSTANTS["value"]))
    for attrs, want in [
        (dict(value_float=0.25), np.float32(0.25)),
        (dict(value_floats=[0.5, 2.0]), np.array([0.5, 2.0], np.float32)),
        (dict(value_int=-3), np.int64(-3)),
    ]:
        got = b.constant(oh.make_node("Constant", [], ["c"], **attrs))
        assert got.dtype == np.asarray(want).dtype and np.array_equal(got, want)
    sp = oh.make_sparse_tensor(
        nh.from_array(np.array([7, 9], np.int8), "v"),
        nh.from_array(np.array([[0, 1], [1, 0]], np.int64), "i"),
        [2, 2],
    )
    got = b.constant(oh.make_node("Constant", [], ["c"], sparse_value=sp))
    np.testing.assert_array_equal(got, np.array([[0, 7], [9, 0]], np.int8))


def test_constant_string_is_a_host_constant():
    """Issue 24: strings are host values; a string Constant is read (ORT runs its users)."""
    from compiler.frontend.reader import _Builder

    b = _Builder(_reshape_after_matmul(CONSTANTS["value"]))
    got = b.constant(oh.make_node("Constant", [], ["c"], value_string="hi"))
    assert got.dtype == object and got.shape == () and got.item() == "hi"
    got = b.constant(oh.make_node("Constant", [], ["c"], value_strings=["a", "b"]))
    assert got.tolist() == ["a", "b"]


# -- host-run QuantizeLinear/DequantizeLinear: ORT interprets attributes; types named -------


def test_host_quantize_types_numpy_cannot_hold_are_rejected_by_name():
    x = [oh.make_tensor_value_info("x", TP.FLOAT, [4])]
    s = oh.make_tensor("s", TP.FLOAT, [], [0.1])
    q4 = oh.make_node("QuantizeLinear", ["x", "s"], ["y"], name="q4", output_dtype=TP.INT4)
    m = finish([q4], x, [oh.make_tensor_value_info("y", TP.INT4, [4])], [s], 21)
    with pytest.raises(FrontendError, match="node 'q4' .*output 'y' has type INT4"):
        to_ir(m)
    s16 = oh.make_tensor("s", TP.FLOAT16, [], [0.1])
    z = nh.from_array(np.array(0, np.int8), "z")
    dq = oh.make_node("DequantizeLinear", ["x8", "s", "z"], ["y"], name="dq16")
    x8 = [oh.make_tensor_value_info("x8", TP.INT8, [4])]
    m = finish([dq], x8, [oh.make_tensor_value_info("y", TP.FLOAT16, [4])], [s16, z], 21)
    g, _ = to_ir(m)  # float16 is a host value (issue 24): ORT runs the DequantizeLinear
    assert g.values["y"].dtype == "float16"


def test_qlinear_activation_zero_point_of_another_type_is_rejected():
    m = _with_attr("QLinearSigmoid", {}, "com.microsoft")
    m.graph.initializer.append(const("zu", 128, "uint8"))
    m.graph.node[0].input[4] = "zu"
    with pytest.raises(FrontendError, match="Y_zero_point has type uint8; the input is int8"):
        to_ir(m)
