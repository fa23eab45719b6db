"""Models the ONNX checker accepts but ONNX Runtime refuses are bad input (exit 2, one line
naming the cause) before anything runs: never "proven", never an internal error later.

Each rule of `compiler.frontend.ort_refusals` is compared with ORT itself on this host: a
model is refused by the tools exactly when ORT cannot load or run it.
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

from compiler.frontend.ort_refusals import REQUIRED_INPUTS, ort_refusal
from tests.cli_helpers import assert_one_line_error, npuc, prover
from tests.models import matmul_activation, two_sites

K, N = 4, 8


def ort_accepts(m: onnx.ModelProto) -> bool:
    """Whether ORT's default CPU session loads `m` and runs it on ones."""
    try:
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {i.name: np.ones(i.shape, np.int8) for i in s.get_inputs()}
        s.run(None, feeds)
    except Exception:  # noqa: BLE001 - any refusal
        return False
    return True


def quant_op(op: str, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """One `op` (QLinearMatMul, MatMulInteger, QLinearConv or QGemm) on int8 x[1, K] with
    weights [K, N] (a 1x1 [N, K, 1, 1] for the conv); `shapes` sets a quantization input's
    shape by role: as, az (input), bs, bz (weights), ys, yz (output); others are scalars."""

    def p(name: str, value: float, dtype: type) -> onnx.TensorProto:
        return nh.from_array(np.full(shapes.get(name, ()), value, dtype), name)

    conv = op == "QLinearConv"
    w = np.ones((N, K, 1, 1) if conv else (K, N), np.int8)
    inits = [nh.from_array(w, "W"), p("as", 0.1, np.float32), p("az", 0, np.int8)]
    inits += [p("bs", 0.01, np.float32), p("bz", 0, np.int8)]
    inits += [p("ys", 0.1, np.float32), p("yz", 0, np.int8)]
    domain, y_type = "", TP.INT8
    if op == "MatMulInteger":
        ins, y_type = ["X", "W", "az", "bz"], TP.INT32
    elif op == "QGemm":
        ins, domain = ["X", "as", "az", "W", "bs", "bz", "", "ys", "yz"], "com.microsoft"
    else:
        ins = ["X", "as", "az", "W", "bs", "bz", "ys", "yz"]
    x_shape = [1, K, 1, 1] if conv else [1, K]
    y_shape = [1, N, 1, 1] if conv else [1, N]
    g = oh.make_graph(
        [oh.make_node(op, ins, ["Y"], name="q", domain=domain)],
        "g",
        [oh.make_tensor_value_info("X", TP.INT8, x_shape)],
        [oh.make_tensor_value_info("Y", y_type, y_shape)],
        inits,
    )
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    m = oh.make_model(g, opset_imports=opsets)
    m.ir_version = 10
    return m


OPS = ("QLinearMatMul", "MatMulInteger", "QLinearConv", "QGemm")
COLUMN_SHAPES = [(), (1,), (N,), (1, N), (1, 1), (N, 1), (K, N), (3,), (K,)]
TENSOR_SHAPES = [(), (1,), (1, 1), (N,)]


def _cases():
    for op in OPS:
        roles = ["bz"] if op == "MatMulInteger" else ["bs", "bz"]
        for role in roles:
            for s in COLUMN_SHAPES:
                # QGemm wants its zero point in its scale's shape: vary the two together
                yield op, {"bs": s, "bz": s} if op == "QGemm" else {role: s}
        for role in ["az"] if op == "MatMulInteger" else ["as", "az", "ys", "yz"]:
            for s in TENSOR_SHAPES:
                yield op, {role: s}
    for bs in [(), (1,), (N,)]:
        for bz in [(), (1,), (N,)]:
            yield "QGemm", {"bs": bs, "bz": bz}


@pytest.mark.parametrize("op,shapes", list(_cases()))
def test_quant_param_rule_is_ort(op, shapes):
    m = onnx.shape_inference.infer_shapes(quant_op(op, shapes))
    assert (ort_refusal(m) is None) == ort_accepts(m), ort_refusal(m)


@pytest.mark.parametrize(
    "op,role,name,want",
    [
        ("QLinearMatMul", "bs", "b_scale 'bs'", "[8]"),
        ("QLinearMatMul", "bz", "b_zero_point 'bz'", "[8]"),
        ("MatMulInteger", "bz", "b_zero_point 'bz'", "[8]"),
        ("QLinearConv", "bs", "w_scale 'bs'", "[8]"),
        ("QGemm", "bz", "b_zero_point 'bz'", "[8]"),
    ],
)
def test_wrong_column_count_is_bad_input(tmp_path: Path, op, role, name, want):
    m = quant_op(op, {role: (3,), **({"bs": (N,)} if op == "QGemm" else {})})
    assert not ort_accepts(m)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off")
    assert_one_line_error(r, "node 'q'", op, name, "[3]", want)
    r = npuc("compile", path, "-o", tmp_path / "p.npz", "--proofs-mode", "off")
    assert_one_line_error(r, "node 'q'", name)


def test_one_element_scale_of_rank_two_is_not_fused(tmp_path: Path):
    """A [1, 1] weight scale is one value to the frontend but ORT refuses it: it was "proven"."""
    m = matmul_activation()
    ws = next(i for i in m.graph.initializer if i.name == "w_s")
    ws.CopyFrom(nh.from_array(np.full((1, 1), 0.01, np.float32), "w_s"))
    assert not ort_accepts(m)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off")
    assert_one_line_error(r, "node 'mm' (QLinearMatMul)", "b_scale 'w_s'", "[1, 1]")


def test_per_column_forms_ort_runs_still_check(tmp_path: Path):
    """[N] is fused as before; [1, N] (which ORT runs) is still accepted."""
    for shape in [(N,), (1, N)]:
        m = quant_op("QLinearMatMul", {"bs": shape, "bz": shape})
        assert ort_accepts(m)
        path = tmp_path / "m.onnx"
        onnx.save(m, path)
        r = prover("check", path, "--proofs-mode", "off")
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""


def _renamed(m: onnx.ModelProto, names: dict[int, str]) -> onnx.ModelProto:
    for i, name in names.items():
        m.graph.node[i].name = name
    return m


@pytest.mark.parametrize(
    "model,names",
    [
        (matmul_activation, {1: "mm"}),  # one chain: was "proven"
        (two_sites, {2: "mm1", 3: "act1"}),  # the second chain named as the first
    ],
    ids=["chain", "two_sites"],
)
def test_duplicate_node_names_are_bad_input(tmp_path: Path, model, names):
    m = _renamed(model(), names)
    dup = m.graph.node[min(names)].name
    assert not ort_accepts(m)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off")
    assert_one_line_error(r, "two nodes are named", repr(dup))
    r = npuc("compile", path, "-o", tmp_path / "p.npz", "--proofs-mode", "off")
    assert_one_line_error(r, "two nodes are named", repr(dup))


def test_repeated_empty_names_are_fine():
    """ORT names unnamed nodes itself: many empty names are no duplicate."""
    m = _renamed(matmul_activation(), {0: "", 1: ""})
    assert ort_accepts(m)
    assert ort_refusal(onnx.shape_inference.infer_shapes(m)) is None


def test_required_inputs_are_ort_schemas():
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    schemas = {x.name: x for x in C.get_all_operator_schema() if x.domain == "com.microsoft"}
    for op, required in REQUIRED_INPUTS.items():
        options = [str(i.option) for i in schemas[op].inputs]
        assert required == tuple(i for i, o in enumerate(options) if o.endswith("Single")), op


def test_qgemm_without_b_zero_point_is_bad_input(tmp_path: Path):
    """The ONNX checker does not know QGemm's schema; ORT cannot load it: it was compiled."""
    m = quant_op("QGemm", {})
    m.graph.node[0].input[5] = ""
    assert not ort_accepts(m)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off")
    assert_one_line_error(r, "node 'q' (QGemm)", "input 5 is required")


def _rewrite_breaks_model() -> onnx.ModelProto:
    """DequantizeLinear -> Sigmoid -> QuantizeLinear (opset 21, int8 by `output_dtype`, no
    zero point) -> QLinearSigmoid: valid ONNX, and ORT runs it with optimisations off, but
    ORT's default session fuses the group into a QLinearSigmoid whose zero point defaults
    to uint8 and refuses its own graph (fuzz seed 7, model 244)."""
    c = lambda n, v, t: nh.from_array(np.asarray(v, dtype=t), n)  # noqa: E731
    inits = [c("s", 0.05, np.float32), c("z", 0, np.int8), c("os", 1 / 256, np.float32)]
    nodes = [
        oh.make_node("DequantizeLinear", ["x", "s", "z"], ["f"], name="dq"),
        oh.make_node("Sigmoid", ["f"], ["g"], name="sig"),
        oh.make_node("QuantizeLinear", ["g", "os"], ["q"], output_dtype=TP.INT8, name="q"),
        oh.make_node(
            "QLinearSigmoid", ["q", "os", "z", "s", "z"], ["y"], name="qs", domain="com.microsoft"
        ),  # fmt: skip
    ]
    g = oh.make_graph(
        nodes, "rewrite_breaks", [oh.make_tensor_value_info("x", TP.INT8, [1, 8])],
        [oh.make_tensor_value_info("y", TP.INT8, [1, 8])], inits,
    )  # fmt: skip
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 10
    return m


def test_model_whose_default_session_fails_is_bad_input(tmp_path: Path):
    m = _rewrite_breaks_model()
    onnx.checker.check_model(m, full_check=True)
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(m.SerializeToString(), off, providers=["CPUExecutionProvider"])
    assert not ort_accepts(m)  # the default session refuses it
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = prover("check", path, "--proofs-mode", "off")
    assert_one_line_error(r, "default session refuses it", "QLinearSigmoid")
