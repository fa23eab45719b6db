"""Issue 11 frontend reach: host placement, dynamic batch, no-op cleanup, QLinearAdd/QGemm.

Conformance compares the IR's concrete evaluation with ONNX Runtime (optimisations off)
under this host's reference profile (`ort-host`), so it holds on any CPU.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_helpers import npuc, prover
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper
from qdq_models import ort_run

from compiler.api import compile_model
from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import resolve_reference
from compiler.ort.tables import session
from compiler.passes import cleanup

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"
QOP = sorted(DIGITS.glob("digits_*_qop_*.onnx"))
QDQ = sorted(DIGITS.glob("digits_*_qdq_*.onnx"))
ALL = sorted(DIGITS.glob("digits_*.onnx"))


@pytest.fixture(scope="module")
def digits() -> np.ndarray:
    return np.load(DIGITS / "digits_test.npz")["input"]


@pytest.fixture(scope="module")
def host_profile():
    return resolve_reference("ort-host")


def _with_outputs(m: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    have = {o.name for o in c.graph.output}
    c.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    return c


# --- conformance: the new ops against ONNX Runtime, bit for bit ----------------------------


@pytest.mark.parametrize("path", QOP, ids=lambda p: p.stem)
def test_qoperator_digits_equal_ort_bit_for_bit(path, digits, host_profile):
    """QGemm and QLinearAdd outputs (and every model output) on the 360 test digits."""
    g, m = to_ir(path, reference=host_profile, batch=len(digits))
    new = [n for n in g.nodes if n.op == "qlinear_binary" or n.attrs.get("kind") == "Gemm"]
    assert len(new) == 3  # three QLinearAdd biases or three QGemm layers, all in the IR
    watched = [n.output for n in new]
    sess = session(_with_outputs(onnx.load(path), watched))
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, {"input": digits}), strict=True))
    env = run_graph(g, {"input": digits}, keep_all=True, reference=host_profile)
    for name in watched + list(g.outputs):
        assert env[name].dtype == ref[name].dtype, name
        assert np.array_equal(env[name], ref[name]), (name, int((env[name] != ref[name]).sum()))


def test_qlinear_add_meaning_is_the_kernel_per_column(host_profile):
    """A wrong constant column would be caught: the IR's evaluation moves with it."""
    path = DIGITS / "digits_matmul_qop_u8s8_pt.onnx"
    g, _ = to_ir(path, reference=host_profile, batch=4)
    add = next(n for n in g.nodes if n.op == "qlinear_binary")
    assert add.attrs["binary"] == "QLinearAdd" and add.attrs["x_is_a"] is True
    assert len(add.attrs["const"]) == g.values[add.output].shape[-1]
    x = np.arange(256, dtype=np.int64).reshape(4, 64) % 256
    from compiler.ir.semantics import eval_node, qlinear_binary_column_table

    g.values[add.inputs[0]].shape = x.shape
    y = eval_node(add, g, {add.inputs[0]: x})[0]
    for j in (0, 17, 63):
        table = qlinear_binary_column_table(add, j)
        assert [table[v] for v in x[:, j]] == list(y[:, j])
    add.attrs["const"] = tuple(c ^ 1 for c in add.attrs["const"])
    assert not np.array_equal(eval_node(add, g, {add.inputs[0]: x})[0], y)


# By default four of the eight, covering MatMul/Gemm, u8s8/s8s8 and per-channel/per-tensor;
# the other four under -m slow.
QDQ_SAMPLE = {
    "digits_matmul_qdq_u8s8_pc",
    "digits_matmul_qdq_s8s8_pt",
    "digits_gemm_qdq_s8s8_pc",
    "digits_gemm_qdq_u8s8_pt",
}


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=[] if p.stem in QDQ_SAMPLE else [pytest.mark.slow]) for p in QDQ],
    ids=lambda p: p.stem,
)
def test_qdq_digits_integer_reading_equals_ort_default_level(path, digits, host_profile):
    """Under the integer QDQ reading the IR computes what ORT runs at its default level."""
    assert str(host_profile.qdq_reading) == "integer"
    g, m = to_ir(path, reference=host_profile, batch=len(digits))
    assert any(n.op == "matmul" for n in g.nodes)  # the groups became integer kernels
    ref = ort_run(path, {"input": digits}, "all")
    got = run_graph(g, {"input": digits}, reference=host_profile)
    for name, r in zip(g.outputs, ref, strict=True):
        assert np.array_equal(got[name], r), (name, int((got[name] != r).sum()))
    # and the float reading (ORT with optimisations off) keeps the float groups on the host
    flt = resolve_reference("onnx-qdq-float")
    g2, _ = to_ir(path, reference=flt, batch=len(digits))
    assert not any(n.op == "matmul" for n in g2.nodes)
    off = session(onnx.load(path)).run(None, {"input": digits})
    got2 = run_graph(g2, {"input": digits}, reference=flt)
    assert all(np.array_equal(got2[n], r) for n, r in zip(g2.outputs, off, strict=True))


# --- the 18 digits models: verdicts, no exit 2, host ops named ----------------------------


# By default a sample covering MatMul/Gemm, QOperator/QDQ/float, u8s8/s8s8 and
# per-channel/per-tensor; the other 14 under -m slow.
REACH_SAMPLE = {
    "digits_matmul_qop_s8s8_pc",
    "digits_gemm_qdq_u8s8_pt",
    "digits_gemm_qop_u8s8_pt",
    "digits_matmul_float",
}


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=[] if p.stem in REACH_SAMPLE else [pytest.mark.slow]) for p in ALL],
    ids=lambda p: p.stem,
)
def test_every_digits_model_is_analysed_with_host_ops_named(path, tmp_path):
    out = tmp_path / "r.sarif"
    r = prover("check", path, "--proofs-mode", "off", "--format", "sarif")
    assert r.returncode in (0, 1, 3), r.stderr
    out.write_text(r.stdout)
    run = json.loads(r.stdout)["runs"][0]
    host = [x for x in run["results"] if "hostOp/v1" in x["partialFingerprints"]]
    named = {loc["name"] for x in host for loc in x["locations"][0]["logicalLocations"]}
    assert {"ArgMax", "ArrayFeatureExtractor", "Cast1"} <= named, named
    codes = {x["ruleId"] for x in host}
    assert "unsupported_op" in codes
    assert all(x["properties"]["action"] for x in host if x["ruleId"] == "unsupported_op")


def test_qoperator_matmul_sites_get_verdicts():
    res = compile_model(DIGITS / "digits_matmul_qop_s8s8_pc.onnx", proofs_mode="off")
    assert len(res.sites) == 2 and all(s.verdict for s in res.sites)
    diags = [d for d in res.diagnostics if d.code == "unsupported_op"]
    assert any("QLinearSoftmax" in d.message for d in diags)
    assert any("ai.onnx.ml" in d.message and d.nodes == ["ArrayFeatureExtractor"] for d in diags)


# --- dynamic batch ---------------------------------------------------------------------


def _static(path: Path, batch: int) -> onnx.ModelProto:
    m = onnx.load(path)
    d = m.graph.input[0].type.tensor_type.shape.dim[0]
    d.Clear()
    d.dim_value = batch
    for o in m.graph.output:
        o.type.tensor_type.shape.dim[0].Clear()
        o.type.tensor_type.shape.dim[0].dim_value = batch
    return m


def _verdicts(model) -> list[tuple]:
    res = compile_model(model, proofs_mode="off")
    return [(s.id, s.pattern, s.verdict, s.obligation_hash) for s in res.sites]


def test_verdicts_and_hashes_do_not_depend_on_the_batch():
    path = DIGITS / "digits_matmul_qop_s8s8_pt.onnx"
    g, _ = to_ir(path)
    assert g.dynamic_batch == ("input",) and g.values["input"].shape == (1, 64)
    dynamic = _verdicts(path)
    assert dynamic and all(h for *_, h in dynamic)
    assert _verdicts(_static(path, 1)) == dynamic
    assert _verdicts(_static(path, 7)) == dynamic


def _batched(node: onnx.NodeProto, out_shape: list) -> onnx.ModelProto:
    g = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, ["N", 4])],
        [oh.make_tensor_value_info("y", TP.FLOAT, out_shape)],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("node", "needle"),
    [
        (oh.make_node("Softmax", ["x"], ["y"], axis=0, name="sm0"), "batch axis"),
        (oh.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="tr"), "row"),
        (oh.make_node("ReduceMax", ["x"], ["y"], axes=[0], keepdims=1, name="rm"), "batch"),
    ],
    ids=["softmax-axis0", "transpose", "reduce-axis0"],
)
def test_rows_mixed_across_the_batch_are_refused(node, needle):
    with pytest.raises(FrontendError) as e:
        to_ir(_batched(node, [None, None]))
    msg = str(e.value)
    assert needle in msg and "static shapes" in msg and f"'{node.name}'" in msg


def test_rowwise_host_op_accepts_a_dynamic_batch():
    g, _ = to_ir(_batched(oh.make_node("Softmax", ["x"], ["y"], axis=1, name="sm1"), ["N", 4]))
    assert g.dynamic_batch == ("x",)


def _npuc(*args) -> subprocess.CompletedProcess:
    return npuc(*args)


def test_npuc_runs_any_batch_and_equals_ort(tmp_path, digits):
    path = DIGITS / "digits_matmul_qop_s8s8_pc.onnx"
    prog = tmp_path / "p.npuprog"
    r = _npuc("compile", path, "-o", prog, "--proofs-mode", "off", "--reference", "ort-host")
    assert r.returncode == 0, r.stderr
    ref = session(onnx.load(path)).run(None, {"input": digits})
    for rows in (1, 360):
        inp, out = tmp_path / f"in{rows}.npz", tmp_path / f"out{rows}.npz"
        np.savez(inp, input=digits[:rows])
        r = _npuc("run", prog, "--input", inp, "-o", out)
        assert r.returncode == 0, r.stderr
        got = np.load(out)
        assert np.array_equal(got["label"], ref[0][:rows])
        assert np.array_equal(got["probabilities"], ref[1][:rows])
    bad = tmp_path / "bad.npz"
    np.savez(bad, input=digits[:5, :60])
    r = _npuc("run", prog, "--input", bad, "-o", tmp_path / "x.npz")
    assert r.returncode == 2 and "expected Nx64" in r.stderr and "Traceback" not in r.stderr


# --- cleanup and host placement of small forms ------------------------------------------


def _float_chain(nodes: list[onnx.NodeProto], out_type=TP.FLOAT) -> onnx.ModelProto:
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
        [oh.make_tensor_value_info("y", out_type, [2, 4])],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_noop_cast_and_dropout_are_removed_a_type_change_stays_on_the_host():
    m = _float_chain(
        [
            oh.make_node("Cast", ["x"], ["c"], to=TP.FLOAT, name="c"),
            oh.make_node("Dropout", ["c"], ["d"], name="d"),
            oh.make_node("Sigmoid", ["d"], ["s"], name="s"),
            oh.make_node("Cast", ["s"], ["y"], to=TP.INT32, name="to_int"),
        ],
        TP.INT32,
    )
    g, _ = to_ir(m)
    g = cleanup.run(g)
    assert [n.op for n in g.nodes] == ["host_onnx", "host_onnx"]
    cast = g.nodes[-1]
    assert cast.origin == ("to_int",) and "float32 to int32" in cast.attrs["placement"]
    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
    ref = session(m).run(None, {"x": x})[0]
    assert np.array_equal(run_graph(g, {"x": x})["y"], ref)


def test_training_dropout_stays_on_the_host():
    m = _float_chain([oh.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")])
    m.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0.5, np.float32), "r"),
            numpy_helper.from_array(np.array(True), "t"),
        ]
    )
    g, _ = to_ir(m)
    assert [n.op for n in g.nodes] == ["host_onnx"] and "training" in g.nodes[0].attrs["placement"]


def _qlinear_add(b_const: bool) -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.array(v, dtype=dt), n)
        for n, v, dt in [
            ("s", 0.05, np.float32),
            ("z", 128, np.uint8),
            ("cs", 0.1, np.float32),
        ]
    ]
    ins = [oh.make_tensor_value_info("a", TP.UINT8, [2, 3])]
    if b_const:
        inits.append(numpy_helper.from_array(np.array([[1, 128, 255]], np.uint8), "b"))
    else:
        ins.append(oh.make_tensor_value_info("b", TP.UINT8, [2, 3]))
    node = oh.make_node(
        "QLinearAdd", ["a", "s", "z", "b", "s", "z", "cs", "z"], ["y"], domain="com.microsoft"
    )
    node.name = "qadd"
    g = oh.make_graph([node], "g", ins, [oh.make_tensor_value_info("y", TP.UINT8, [2, 3])], inits)
    return oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )


def test_qlinear_add_forms(host_profile):
    g, m = to_ir(_qlinear_add(True), reference=host_profile)
    assert [n.op for n in g.nodes] == ["qlinear_binary"]
    a = np.array([[0, 100, 255], [7, 128, 200]], np.uint8)
    assert np.array_equal(run_graph(g, {"a": a})["y"], session(m).run(None, {"a": a})[0])  # exact
    g, m = to_ir(_qlinear_add(False), reference=host_profile)
    (n,) = g.nodes
    assert n.op == "eltwise" and n.inputs == ["a", "b"]  # two activations: the NPU's op
    b = a[::-1].copy()
    assert np.array_equal(
        run_graph(g, {"a": a, "b": b})["y"], session(m).run(None, {"a": a, "b": b})[0]
    )


def test_qgemm_without_y_scale_stays_on_the_host():
    inits = [
        numpy_helper.from_array(np.array(v, dtype=dt), n)
        for n, v, dt in [("s", 0.05, np.float32), ("z", 0, np.int8), ("bz", 0, np.int8)]
    ]
    inits.append(numpy_helper.from_array(np.ones((4, 3), np.int8), "B"))
    node = oh.make_node(
        "QGemm", ["a", "s", "z", "B", "s", "bz"], ["y"], domain="com.microsoft", name="qg"
    )
    g = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("a", TP.INT8, [2, 4])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
        inits,
    )
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    g, _ = to_ir(m)
    (n,) = g.nodes
    assert n.op == "host_onnx" and "float output" in n.attrs["placement"]


def test_host_ops_in_json_and_junit_reports():
    import xml.etree.ElementTree as ET

    import jsonschema

    model = DIGITS / "digits_gemm_qop_s8s8_pt.onnx"
    base = ["check", model, "--proofs-mode"]
    r = prover(*base, "off", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    schema = json.loads((REPO / "compiler" / "report" / "schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)
    by_node = {h["nodes"][0]: h for h in data["host_ops"]}
    assert {"Sigmoid2_quant", "ArgMax", "ArrayFeatureExtractor", "Cast1"} <= set(by_node)
    afe = by_node["ArrayFeatureExtractor"]
    assert afe["code"] == "unsupported_op" and "ai.onnx.ml" in afe["message"] and afe["action"]
    r = prover(*base, "off", "--format", "junit")
    props = {p.get("name"): p.get("value") for p in ET.fromstring(r.stdout).iter("property")}
    host = [v for k, v in props.items() if k.startswith("host_op.")]
    assert any("[unsupported_op]" in v and "'ArgMax'" in v and "action" in v for v in host)


def test_float_op_on_integers_stays_on_the_host():
    g = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"], name="r")],
        "g",
        [oh.make_tensor_value_info("x", TP.INT8, [2, 3])],
        [oh.make_tensor_value_info("y", TP.INT8, [2, 3])],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    ir, _ = to_ir(m)
    (n,) = ir.nodes
    assert n.op == "host_onnx" and "Relu on int8" in n.attrs["placement"]
    x = np.array([[-3, 0, 5], [127, -128, 1]], np.int8)
    assert np.array_equal(run_graph(ir, {"x": x})["y"], session(m).run(None, {"x": x})[0])
