"""Frontend: accepted forms lower to an IR whose kernel semantics equal ONNX Runtime; bad input
is a one-line FrontendError naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import OPSETS, const, make, matmul_activation, random_inputs, requantize_node
from onnx import TensorProto as TP
from onnx import helper as oh

from compiler.errors import FrontendError
from compiler.frontend.qdq_reading import ort_integer_model
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile
from compiler.ort.tables import TableSpec, ort_table, session
from prover.lut import build_ort_sigmoid_table
from prover.mlas import host_uses_fma
from prover.reference import get_profile

ORT_MODELS = [
    dict(),
    dict(per_channel=True, K=32, N=6),
    dict(clip=(-20, 50), reshape="unit"),
    dict(act_form="qdq", activation="tanh"),
    dict(act_form="qdq", activation="relu"),
    dict(activation="leakyrelu"),
    dict(double_activation=True, extra_user="node"),
    dict(float_input=True, transpose=(1, 0)),
    dict(form="qdq"),
    dict(form="qdq", per_channel=True),
    dict(form="qdq_gemm"),
    dict(float_roundtrip=True),
    dict(a_zp=5, w_zp=-3, y_zp=7, M=3),
]


@pytest.mark.parametrize(
    "kw", ORT_MODELS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain"
)
def test_ir_reference_equals_onnxruntime(kw):
    m = matmul_activation(**kw)
    g, _ = to_ir(m, reference=host_profile())  # ORT on this host is what we compare with
    sess = session(m)
    for seed in range(3):
        inp = random_inputs(m, seed)
        ref = sess.run(None, inp)
        got = run_graph(g, inp)
        for r, o in zip(ref, m.graph.output, strict=True):
            np.testing.assert_array_equal(np.asarray(r), got[o.name])
    # boundary inputs: saturation at both ends
    for v in (-128, 127):
        inp = {
            k: np.full_like(a, v if a.dtype != np.float32 else v / 10)
            for k, a in random_inputs(m).items()
        }
        for r, o in zip(sess.run(None, inp), m.graph.output, strict=True):
            np.testing.assert_array_equal(np.asarray(r), run_graph(g, inp)[o.name])


def test_forms_lower_to_kernel_ops():
    g, _ = to_ir(matmul_activation(form="integer", clip=(-10, 10)))
    assert [n.op for n in g.nodes] == ["matmul", "requantize", "clip", "lut"]
    assert g.nodes[0].attrs["requant"] is None and g.values[g.nodes[0].output].dtype == "int32"
    # the float QDQ reading: the groups as written (a table of the DQ -> act -> Q group; the
    # float MatMul group on the host)
    flt = get_profile("onnx-qdq-float")
    g, _ = to_ir(matmul_activation(act_form="qdq"), reference=flt)
    assert [n.op for n in g.nodes] == ["matmul", "lut"] and g.nodes[1].origin == (
        "act_dq",
        "act",
        "act_q",
    )
    assert g.nodes[1].attrs["source"] == "qdq"
    g, _ = to_ir(matmul_activation(form="qdq"), reference=flt)
    assert g.nodes[0].op == "host_onnx" and g.nodes[0].attrs["compute"] == "MatMul"
    # the integer reading (the default): ORT's QDQ transformers' QLinearSigmoid / QLinearMatMul
    g, _ = to_ir(matmul_activation(act_form="qdq"))
    assert [n.op for n in g.nodes] == ["matmul", "lut"] and g.nodes[1].origin == ("act",)
    assert g.nodes[1].attrs["source"] == "qlinear"
    # an int8-activation QDQ MatMul: ORT's x86-64 build keeps it float, so does the reading
    m = matmul_activation(form="qdq")
    ort_ops = {n.op_type for n in ort_integer_model(m).graph.node}
    g, _ = to_ir(m)
    want = "matmul" if "QLinearMatMul" in ort_ops else "host_onnx"
    assert g.nodes[0].op == want


def test_qlinear_sigmoid_table_is_onnxruntimes_and_matches_kernel_emulation():
    rng = np.random.default_rng(1)
    for _ in range(10):
        s, z = float(rng.uniform(0.01, 0.3)), int(rng.integers(-30, 30))
        t = ort_table(TableSpec("qlinear", "QLinearSigmoid", s, z, "int8", 1 / 256, -128, "int8"))
        want = build_ort_sigmoid_table(s, z, "int8", 1 / 256, -128, "int8", fused=host_uses_fma())
        assert list(t) == list(want)


def test_requantize_project_op_semantics():
    m = make(
        [requantize_node("x", "y", multiplier=1 << 30, shift=-1, rounding="double")],
        [oh.make_tensor_value_info("x", TP.INT32, [4])],
        [oh.make_tensor_value_info("y", TP.INT8, [4])],
        [],
    )
    g, _ = to_ir(m)
    x = np.array([-1998, -2, 2, 500], dtype=np.int32)
    # x * 2^30 * 2^-32 = x / 4, rounded, saturated to int8
    assert run_graph(g, {"x": x})["y"].tolist() == [-128, -1, 1, 125]
    # DESIGN.md: x=-1998, M=2^30, s=-1: double rounding gives -500, single rounding -499
    m2 = make(
        [
            requantize_node(
                "x", "y", multiplier=1 << 30, shift=-1, rounding="double", output_type="int16"
            )
        ],
        [oh.make_tensor_value_info("x", TP.INT32, [1])],
        [oh.make_tensor_value_info("y", TP.INT16, [1])],
        [],
    )
    assert int(run_graph(to_ir(m2)[0], {"x": np.array([-1998], np.int32)})["y"][0]) == -500
    m3 = make(
        [
            requantize_node(
                "x", "y", multiplier=1 << 30, shift=-1, rounding="single", output_type="int16"
            )
        ],
        [oh.make_tensor_value_info("x", TP.INT32, [1])],
        [oh.make_tensor_value_info("y", TP.INT16, [1])],
        [],
    )
    assert int(run_graph(to_ir(m3)[0], {"x": np.array([-1998], np.int32)})["y"][0]) == -499


# -- errors ------------------------------------------------------------------------------


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_unsupported_op_stays_on_the_host_named():
    m = make(
        [oh.make_node("Softmax", ["x"], ["y"], name="soft")],
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
        [],
    )
    g, _ = to_ir(m)  # kept on the host, with the reason naming the node
    (n,) = g.nodes
    assert n.op == "host_onnx" and "node 'soft' (Softmax)" in n.attrs["placement"]


def test_dynamic_weights_are_a_matmul_of_two_activations():
    m = matmul_activation()
    # turn the weight initializer into a graph input: no longer a constant
    w = next(i for i in m.graph.initializer if i.name == "W")
    m.graph.input.append(oh.make_tensor_value_info("W", TP.INT8, list(w.dims)))
    m.graph.initializer.remove(w)
    g, _ = to_ir(m)  # both operands run-time: `matmul_act` (tests/test_dynamic_matmul.py)
    mm = next(n for n in g.nodes if n.origin == ("mm",))
    assert mm.op == "matmul_act" and mm.inputs[1] == "W"


def test_wrong_dtype_names_node():
    inits = [
        const(n, v, t)
        for n, v, t in (("s", 0.1, "float32"), ("z", 0, "int8"), ("s2", 0.1, "float32"))
    ]
    m = make(
        [
            oh.make_node(
                "QLinearSigmoid",
                ["x", "s", "z", "s2", "z"],
                ["y"],
                name="sig",
                domain="com.microsoft",
            )
        ],
        [oh.make_tensor_value_info("x", TP.INT32, [4])],
        [oh.make_tensor_value_info("y", TP.INT32, [4])],
        inits,
    )
    with pytest.raises(FrontendError) as e:
        to_ir(m)
    assert "node 'sig' (QLinearSigmoid)" in one_line(e) and "int32" in one_line(e)


def test_dynamic_batch_is_accepted_and_other_dynamic_dims_name_node():
    m = matmul_activation()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    g, _ = to_ir(m)
    assert g.dynamic_batch == ("x",)
    m = matmul_activation()
    m.graph.input[0].type.tensor_type.shape.dim[-1].dim_param = "k"
    with pytest.raises(FrontendError) as e:
        to_ir(m)
    msg = one_line(e)
    assert "'x'" in msg and "node 'mm' (QLinearMatMul)" in msg and "dynamic dimension 'k'" in msg


@pytest.mark.parametrize(
    "attrs,needle",
    [
        (dict(multiplier=1 << 31, shift=0), "does not fit int32"),
        (dict(multiplier=1 << 30, shift=0, output_type="float32"), "output_type"),
        (dict(multiplier=1 << 30, shift=0, rounding="stochastic"), "rounding"),
        (dict(multiplier=1 << 30, shift=0, zero_point=300), "zero_point"),
    ],
)
def test_requantize_bad_attributes_name_node(attrs, needle):
    m = make(
        [requantize_node("x", "y", **attrs)],
        [oh.make_tensor_value_info("x", TP.INT32, [4])],
        [oh.make_tensor_value_info("y", TP.INT8, [4])],
        [],
    )
    with pytest.raises(FrontendError) as e:
        to_ir(m)
    assert "node 'rq' (Requantize)" in one_line(e) and needle in one_line(e)


def test_invalid_model_is_frontend_error(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"not an onnx model")
    with pytest.raises(FrontendError):
        to_ir(str(p))
    m = matmul_activation()
    m.graph.node[0].input[0] = "nowhere"
    with pytest.raises(FrontendError, match="validation"):
        to_ir(m)


def test_unknown_domain_rejected():
    """A domain a node uses that ONNX Runtime does not know is refused; an import nothing
    uses is ignored, as ONNX Runtime ignores it."""
    m = matmul_activation()
    m.opset_import.append(oh.make_opsetid("com.example", 1))
    to_ir(m)  # unused: read
    out = m.graph.output[0].name
    m.graph.node.append(oh.make_node("Foo", [out], ["foo_out"], domain="com.example"))
    m.graph.output.append(oh.make_tensor_value_info("foo_out", onnx.TensorProto.UINT8, [1]))
    with pytest.raises(FrontendError, match="com.example"):
        to_ir(m)
    assert OPSETS  # builders always declare the three domains they use
    assert isinstance(m, onnx.ModelProto)


@pytest.mark.parametrize("y_scale", [0.0, -0.05, float("nan"), float("inf")])
def test_bad_scale_names_node_without_warnings(y_scale, recwarn):
    with pytest.raises(FrontendError) as e:
        to_ir(matmul_activation(y_scale=y_scale))
    assert "node 'mm' (QLinearMatMul)" in one_line(e) and "finite and positive" in one_line(e)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_huge_input_shape_rejected():
    m = matmul_activation()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1 << 40
    with pytest.raises(FrontendError) as e:
        to_ir(m)
    assert "'x'" in one_line(e) and "2^31" in one_line(e)
