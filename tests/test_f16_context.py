"""float16 QDQ groups in context (fuzzer findings 6 and 11): ORT's arithmetic depends on the
graph around DequantizeLinear -> act -> QuantizeLinear, and the frontend follows it.

ORT 1.32's InsertCastTransformer casts a float16 group to float32 either after the
DequantizeLinear (its output rounded to float16: DQ input is a graph input) or on its
scale (DQ computes in float32: DQ input produced by another node). Minimal case: uint8 x
-> [Identity] -> DQ(s=f16 0.00217056, zp 184) -> Tanh -> Q(f16 0.00390625, zp 255),
opset 20, x = 73: ORT at level off gives 194 without the Identity, 195 with it (the
default level removes the Identity: 194).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_helpers import assert_one_line_error, npuc, prover
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from qdq_models import check_end_to_end, finish, ort_run

from compiler.errors import FrontendError
from compiler.frontend.f16_context import fold_cast, ort_dequantize_types
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from prover.lut import build_ort_qdq_table
from prover.mlas import host_uses_fma
from prover.reference import get_profile

FUSED = host_uses_fma()
XS, XZ, YS, YZ = float(np.float16(0.00217056)), 184, 0.00390625, 255
ALL_U8 = {"x": np.arange(256, dtype=np.uint8)}


def _group(pre: str | None, act: str = "Tanh", xs=XS, xz=XZ, ys=YS, yz=YZ, opset=20):
    """[pre ->] DQ(f16) -> act -> Q(f16) on a uint8 [256] input."""
    nodes, src, inits = [], "x", []
    if pre == "Identity":
        nodes.append(oh.make_node("Identity", ["x"], ["xi"], name="id"))
        src = "xi"
    elif pre == "Reshape":
        inits.append(nh.from_array(np.array([256], np.int64), "shape"))
        nodes.append(oh.make_node("Reshape", ["x", "shape"], ["xi"], name="rs"))
        src = "xi"
    nodes += [
        oh.make_node("DequantizeLinear", [src, "xs", "xz"], ["d"], name="dq"),
        oh.make_node(act, ["d"], ["a"], name="act"),
        oh.make_node("QuantizeLinear", ["a", "ys", "yz"], ["y"], name="q"),
    ]
    inits += [
        oh.make_tensor("xs", TP.FLOAT16, [], [np.float16(xs)]),
        oh.make_tensor("xz", TP.UINT8, [], [xz]),
        oh.make_tensor("ys", TP.FLOAT16, [], [np.float16(ys)]),
        oh.make_tensor("yz", TP.UINT8, [], [yz]),
    ]
    return finish(
        nodes,
        [oh.make_tensor_value_info("x", TP.UINT8, [256])],
        [oh.make_tensor_value_info("y", TP.UINT8, [256])],
        inits,
        opset,
    )


def _table(dq_type: str, act="tanh", xs=XS, xz=XZ, ys=YS, yz=YZ, opset=20) -> np.ndarray:
    return build_ort_qdq_table(
        act, xs, xz, "uint8", ys, yz, "uint8", fused=FUSED, scale_type="float16",
        quantize_precision="float16" if opset >= 23 else "float32", dequantize_type=dq_type,
    )  # fmt: skip


def test_minimal_case_depends_on_the_producer():
    """The fuzzer's minimal case, measured: both arithmetics are real and differ at x=73."""
    assert ort_run(_group(None), ALL_U8, "off")[0][73] == 194
    assert ort_run(_group("Identity"), ALL_U8, "off")[0][73] == 195
    assert ort_run(_group("Identity"), ALL_U8, "all")[0][73] == 194
    assert _table("float16")[73] == 194 and _table("float32")[73] == 195


@pytest.mark.parametrize("opset", [20, 23])
def test_both_table_models_equal_ort_in_their_context(opset):
    rng = np.random.default_rng(opset)
    for _ in range(12):
        xs = float(np.float16(10 ** rng.uniform(-4, 1)))
        ys = float(np.float16(10 ** rng.uniform(-4, 0)))
        xz, yz = (int(v) for v in rng.integers(0, 256, 2))
        for act in ("Tanh", "Sigmoid", "Relu"):
            kw = dict(xs=xs, xz=xz, ys=ys, yz=yz, opset=opset)
            for pre, level, dq in (
                (None, "off", "float16"),
                (None, "all", "float16"),
                ("Identity", "off", "float32"),
                ("Reshape", "off", "float32"),
                ("Reshape", "all", "float32"),
            ):
                got = ort_run(_group(pre, act, **kw), ALL_U8, level)[0]
                np.testing.assert_array_equal(_table(dq, act.lower(), **kw), got)


def test_ort_cast_placement_is_read_per_level():
    assert ort_dequantize_types(_group(None), "off")["y"] == "float16"
    assert ort_dequantize_types(_group("Identity"), "off")["y"] == "float32"
    assert ort_dequantize_types(_group("Identity"), "default")["y"] == "float16"
    assert ort_dequantize_types(_group("Reshape"), "default")["y"] == "float32"


@pytest.mark.parametrize(
    "pre,profile,level",
    [(None, "onnx", "all"), (None, "onnx-qdq-float", "off"), ("Identity", "onnx-qdq-float", "off"),
     ("Reshape", "onnx", "all"), ("Reshape", "onnx-qdq-float", "off")],
)  # fmt: skip
def test_frontend_table_equals_ort_at_the_reference_level(pre, profile, level):
    m = _group(pre)
    g, _ = to_ir(m, reference=get_profile(profile))
    np.testing.assert_array_equal(run_graph(g, ALL_U8)["y"], ort_run(m, ALL_U8, level)[0])


def test_level_dependent_group_is_rejected_under_the_integer_reading():
    """Identity -> DQ: 195 at level off (counterexample replay), 194 at the default level."""
    with pytest.raises(FrontendError, match="node 'q' .*levels default and off"):
        to_ir(_group("Identity"), reference=get_profile("onnx"))


def test_level_dependent_group_cli_exit_2(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_group("Identity"), p)
    r = prover("check", p, "--proofs-mode", "off", "--no-progress")
    assert_one_line_error(r, "node 'q' (QuantizeLinear)", "float16")
    r = npuc("compile", p, "-o", tmp_path / "p.npuprog", "--proofs-mode", "off")
    assert_one_line_error(r, "node 'q' (QuantizeLinear)", "float16")


@pytest.mark.parametrize("pre", [None, "Identity"])
def test_minimal_case_end_to_end_under_the_float_reading(pre, tmp_path):
    """prover check / npuc compile / npuc run equal ORT at level off, both contexts."""
    got = check_end_to_end(_group(pre), ALL_U8, tmp_path, args=("--reference", "onnx-qdq-float"))
    assert got["y"][73] == (195 if pre else 194)


def _matmul_group(act: str = "Tanh"):
    """QLinearMatMul -> DQ(f16) -> act -> Q(f16): the DQ computes in float32 in ORT."""
    rng = np.random.default_rng(3)
    inits = [nh.from_array(rng.integers(0, 256, (16, 4)).astype(np.uint8), "W")]
    inits += [
        nh.from_array(np.array(v, dtype=dt), n)
        for n, v, dt in [
            ("as", 0.02, np.float32), ("az", 3, np.uint8), ("ws", 0.01, np.float32),
            ("wz", 120, np.uint8), ("hs", 0.05, np.float32), ("hz", XZ, np.uint8),
            ("xs", XS, np.float16), ("ys", YS, np.float16), ("yz", YZ, np.uint8),
        ]
    ]  # fmt: skip
    nodes = [
        oh.make_node("QLinearMatMul", ["x", "as", "az", "W", "ws", "wz", "hs", "hz"], ["h"]),
        oh.make_node("DequantizeLinear", ["h", "xs", "hz"], ["f"], name="dq"),
        oh.make_node(act, ["f"], ["g"], name="act"),
        oh.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"], name="q"),
    ]
    return finish(
        nodes,
        [oh.make_tensor_value_info("x", TP.UINT8, [64, 16])],
        [oh.make_tensor_value_info("y", TP.UINT8, [64, 4])],
        inits,
        20,
    )


def test_host_table_after_a_matmul_equals_ort(tmp_path):
    """Was (seed 0 model 350): the group stayed on the host as a table 1 off ORT's."""
    m = _matmul_group()
    feeds = {"x": np.random.default_rng(1).integers(0, 256, (64, 16)).astype(np.uint8)}
    g, _ = to_ir(m)
    lut = next(n for n in g.nodes if n.op == "lut")
    assert tuple(lut.attrs["table"]) == tuple(_table("float32"))
    assert tuple(lut.attrs["table"]) != tuple(_table("float16"))
    got = check_end_to_end(m, feeds, tmp_path, verdict="REFUTED", args=("--policy", "bitwise"))
    np.testing.assert_array_equal(got["y"], ort_run(m, feeds, "all")[0])


def _ort_graph(m: onnx.ModelProto, level) -> onnx.ModelProto:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    so.optimized_model_filepath = str(_ort_graph.tmp / "o.onnx")
    ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    r = onnx.load(so.optimized_model_filepath)
    keep = [o for o in r.opset_import if o.domain in ("", "ai.onnx")]  # ORT lists others
    del r.opset_import[:]
    r.opset_import.extend(keep)
    return r


@pytest.mark.parametrize("pre", [None, "Identity"])
def test_graph_with_ort_casts_is_read(pre, tmp_path):
    """Finding 11: ORT's own graph (InsertedPrecisionFreeCast_* on a float16 scale or after
    the DequantizeLinear) is read: the Cast of a constant folds, the group is one table."""
    _ort_graph.tmp = tmp_path
    m = _group(pre)
    r = _ort_graph(m, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert any(n.op_type == "Cast" for n in r.graph.node)
    if pre:
        assert any(n.op_type == "Cast" and n.input[0] == "xs" for n in r.graph.node)
    g, _ = to_ir(r, reference=get_profile("onnx-qdq-float"))
    assert [n.op for n in g.nodes if n.op != "identity"] == ["lut"]
    np.testing.assert_array_equal(run_graph(g, ALL_U8)["y"], ort_run(m, ALL_U8, "off")[0])


def test_fold_cast_is_exact_or_refused():
    f16 = np.array(0.00217056, np.float16)
    assert fold_cast(f16, TP.FLOAT).dtype == np.float32
    assert float(fold_cast(f16, TP.FLOAT)) == float(f16)
    assert fold_cast(np.array(0.1, np.float32), TP.FLOAT16) == np.float16(0.1)
    assert fold_cast(np.array([1, 2], np.uint8), TP.INT32).tolist() == [1, 2]
    assert fold_cast(np.array(1.5, np.float32), TP.INT8) is None  # float -> int: not folded
    assert fold_cast(np.array(300, np.int32), TP.UINT8) is None  # wraps: not folded


def test_cast_of_a_constant_that_is_not_folded_is_exit_2(tmp_path):
    """A float -> uint8 Cast of a constant is not folded by the frontend: the model as
    written is refused where it is what runs (the float QDQ reading, ORT at level off).
    Under the integer reading the IR is ORT's default-level graph, where ORT folded the
    Cast itself (`compiler.frontend.qdq_reading`), and the program equals that session."""
    nodes = [
        oh.make_node("Cast", ["c"], ["ci"], to=TP.UINT8, name="cast_c"),
        oh.make_node("Add", ["x", "ci"], ["y"], name="add"),
    ]
    m = finish(
        nodes,
        [oh.make_tensor_value_info("x", TP.UINT8, [4])],
        [oh.make_tensor_value_info("y", TP.UINT8, [4])],
        [nh.from_array(np.array(1.5, np.float32), "c")],
        20,
    )
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    assert_one_line_error(
        prover(
            "check", p, "--proofs-mode", "off", "--no-progress", "--reference", "onnx-qdq-float"
        ),
        "node 'cast_c' (Cast)",
    )
    x = {"x": np.array([0, 7, 200, 255], np.uint8)}
    got = check_end_to_end(m, x, tmp_path, args=("--reference", "onnx"))
    np.testing.assert_array_equal(got["y"], ort_run(m, x, "all")[0])


def test_user_written_casts_after_a_producer_are_read_as_written():
    """DQ(f16) -> Cast(float) -> Tanh -> Cast(float16) -> Q after a Reshape: the user's own
    casts keep the DQ output in float16 (ORT does not move them), unlike the plain group."""
    nodes = [
        oh.make_node("Reshape", ["x", "shape"], ["xi"], name="rs"),
        oh.make_node("DequantizeLinear", ["xi", "xs", "xz"], ["d"], name="dq"),
        oh.make_node("Cast", ["d"], ["d32"], to=TP.FLOAT, name="c1"),
        oh.make_node("Tanh", ["d32"], ["a32"], name="act"),
        oh.make_node("Cast", ["a32"], ["a"], to=TP.FLOAT16, name="c2"),
        oh.make_node("QuantizeLinear", ["a", "ys", "yz"], ["y"], name="q"),
    ]
    plain = _group("Reshape")
    m = finish(nodes, list(plain.graph.input), list(plain.graph.output),
               list(plain.graph.initializer), 20)  # fmt: skip
    g, _ = to_ir(m)
    lut = next(n for n in g.nodes if n.op == "lut")
    assert tuple(lut.attrs["table"]) == tuple(_table("float16"))
    for level in ("off", "all"):
        np.testing.assert_array_equal(run_graph(g, ALL_U8)["y"], ort_run(m, ALL_U8, level)[0])


@pytest.mark.parametrize("pre,dq_type", [(None, "float16"), ("Reshape", "float32")])
def test_group_after_a_project_requantize(pre, dq_type):
    """ORT cannot run ai.npufusion Requantize: it is cut out and its output read as an input
    of the graph ORT runs around it (the fuzzer's reference runs those segments the same way)."""
    base = _group(pre)
    rq = oh.make_node("Requantize", ["acc"], ["x"], name="rq", domain="ai.npufusion",
                      multiplier=1 << 30, shift=0, zero_point=0, output_type="uint8")  # fmt: skip
    g = oh.make_graph([rq, *base.graph.node], "g",
                      [oh.make_tensor_value_info("acc", TP.INT32, [256])],
                      list(base.graph.output), list(base.graph.initializer))  # fmt: skip
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 20), oh.make_opsetid("ai.npufusion", 1)]
    )
    m.ir_version = 10
    ir, _ = to_ir(m)
    lut = next(n for n in ir.nodes if n.op == "lut")
    assert tuple(lut.attrs["table"]) == tuple(_table(dq_type))
