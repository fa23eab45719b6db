"""A QLinearAdd bias inside a fusion site, on the shipped digits models (ORT's quantizer).

QLinearMatMul -> QLinearAdd(bias) -> QLinearSigmoid: on npu_float the postprocessor's
add stage keeps both roundings (proven bitwise, program equal to ONNX Runtime on the
360 test digits); on npu_fixed the bias can only be folded into the accumulator, which
removes a rounding: an obligation, refuted with a replayed whole-model input.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from qdq_models import ort_outputs

from compiler.api import compile_model
from compiler.ir.epilogue import build_columns
from npu_backend.codegen import generate
from npu_backend.ledger import ledger
from npu_backend.lowered import NpuMatMul
from npu_backend.postprocess import posts_of
from npu_backend.runner import run_batched
from npu_backend.target import TargetError, load_target, parse_target
from npu_backend.validate import validate_step
from prover.api import check
from prover.inttypes import int_type
from prover.matmul import accumulator_range
from prover.obligation import Obligation
from prover.policy import Policy
from prover.terms import Var

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"
FLOAT_T = load_target("npu_backend/targets/npu_float.toml")
FIXED_T = load_target("npu_backend/targets/npu_fixed.toml")


@pytest.fixture(scope="module")
def digits() -> np.ndarray:
    return np.load(DIGITS / "digits_test.npz")["input"]


def _ort(path, x):
    """ORT at its default optimisation level on the digits input `x`."""
    return ort_outputs(path, {"input": x}, "all")


@pytest.mark.parametrize(
    "model", ["digits_matmul_qop_s8s8_pc.onnx", "digits_matmul_qop_u8s8_pt.onnx"]
)
def test_qlinearadd_bias_is_fused_with_its_own_rounding(model):
    r = compile_model(DIGITS / model, "bitwise", FLOAT_T, reference="onnx")
    assert [s.pattern for s in r.sites] == ["matmul+qlinearadd+sigmoid"] * 2
    assert all(s.verdict == "proven" and s.applied for s in r.sites)
    assert r.sites[0].nodes == ["MatMul_quant", "Add_quant", "Sigmoid_quant"]
    fused = [st for st in r.lowered.steps if isinstance(st, NpuMatMul) and st.fused]
    assert len(fused) == 2
    for st in fused:
        posts = posts_of(st.post)
        assert all(p.add is not None and p.add.fma for p in posts)
        # one bias value per column reaches the add stage (the quantizer's uint8/int8 [N])
        assert len({p.add.const for p in posts}) > 1
    # the last layer's QLinearAdd (into the host's QLinearSoftmax) stays a separate host op
    assert any("Add2_quant" in d.nodes and d.code == "unsupported_op" for d in r.diagnostics)


@pytest.mark.parametrize(
    "model",
    [
        pytest.param("digits_matmul_qop_s8s8_pt.onnx", marks=pytest.mark.slow),
        "digits_matmul_qop_u8s8_pc.onnx",
    ],
)
def test_program_equals_onnx_runtime_on_the_test_digits(model, digits):
    """Under the host's own profile, only proven fusions applied: bit for bit equal."""
    tgt = FLOAT_T
    r = compile_model(DIGITS / model, "bitwise", tgt, reference="ort-host")
    prog = generate(r.lowered, tgt)
    got = run_batched(prog, {"input": digits})[0]
    want = _ort(DIGITS / model, digits)
    for k, v in want.items():
        assert np.array_equal(np.asarray(got[k]), v), k


def test_ledger_counts_the_removed_qlinearadd():
    r = compile_model(DIGITS / "digits_matmul_qop_u8s8_pc.onnx", "bitwise", FLOAT_T)
    entries = ledger(r.lowered, FLOAT_T)
    assert [e.removed_ops for e in entries] == [("QLinearAdd",)] * 2
    for e in entries:
        # measured: the original's host round trip (DmaOut, the host reading x and one bias
        # byte per column, writing its result, DmaIn: 5 bytes per element at batch 1)
        # against the fused epilogue's larger parameter record (12 bytes of add stage per
        # column of this per-channel model)
        assert e.dram_bytes_not_moved == 5 * e.elements - 12 * e.elements
        assert e.bytes_not_written >= e.expected_bytes
        assert e.instructions_before > e.instructions_after


def test_folding_the_bias_on_a_fixed_point_target_is_refuted():
    """npu_fixed has no add stage: the bias folds into the accumulator, one rounding fewer.
    The interior sites are held to bitwise even under bounded:N, and refuted with an input
    that replays on the whole model."""
    r = compile_model(
        DIGITS / "digits_matmul_qop_s8s8_pt.onnx",
        "bounded:8",
        FIXED_T,
        reference="onnx",
        synthesis=False,
    )
    assert [s.verdict for s in r.sites] == ["refuted", "refuted"]
    for s in r.sites:
        assert s.reason.code == "refuted" and "bitwise" in s.reason.message
        assert all(g.acc_offset != 0 for g in s.post[:1]) or any(g.acc_offset for g in s.post)
        assert all(p.add is None for g in s.post for p in posts_of(g.post))
        cx = s.counterexample
        assert cx is not None and cx.before != cx.after
    assert not any(st.fused for st in r.lowered.steps if isinstance(st, NpuMatMul))


def test_a_wrong_add_stage_is_refuted():
    """Negative: the add stage with a bias off by one step is not the QLinearAdd."""
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pt.onnx", "bitwise", FLOAT_T)
    site = r.sites[0]
    grp = build_columns(site, FLOAT_T)[0]
    p = grp.post
    bad = dataclasses.replace(p, add=dataclasses.replace(p.add, const=p.add.const + 1))
    a = site.compute.attrs
    rng = accumulator_range(
        a["w"], np.asarray(a["w_zp"]), int_type(a["a_type"]), int(a["a_zp"]), a["bias"]
    )
    j = grp.columns[0]
    ranges = {"acc": (int(rng.lo[j]), int(rng.hi[j]))}
    good = check(Obligation("epilogue", grp.before, grp.after(Var("acc")), ranges, Policy(0)))
    assert good.status == "proven"
    v = check(Obligation("epilogue", grp.before, bad.epilogue_term(Var("acc")), ranges, Policy(0)))
    assert v.status == "refuted"


def test_add_stage_needs_the_target_capability():
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pt.onnx", "bitwise", FLOAT_T)
    st = next(s for s in r.lowered.steps if isinstance(s, NpuMatMul) and s.fused)
    assert validate_step(st, FLOAT_T) == []
    issues = validate_step(st, FIXED_T)
    assert any(i.code == "unsupported_function" and "add stage" in i.message for i in issues)


def _with_add(st: NpuMatMul, **change) -> NpuMatMul:
    """`st` with every column group's add stage changed by `change`."""
    posts = tuple(
        dataclasses.replace(p, add=dataclasses.replace(p.add, **change)) for p in posts_of(st.post)
    )
    return dataclasses.replace(st, post=posts[0] if len(posts) == 1 else posts)


@pytest.mark.parametrize(
    ("change", "words"),
    [({"fma": None}, "fma="), ({"type": None}, "differs from the intermediate type")],
)
def test_add_stage_must_match_the_hardware(change, words):
    """Negative: an add stage whose fma flag or type is not the hardware's is incomplete."""
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pt.onnx", "bitwise", FLOAT_T)
    st = next(s for s in r.lowered.steps if isinstance(s, NpuMatMul) and s.fused)
    add = posts_of(st.post)[0].add
    assert add is not None
    if "fma" in change:
        change = {"fma": not add.fma}
    else:
        change = {"type": "uint8" if add.type == "int8" else "int8"}
    issues = validate_step(_with_add(st, **change), FLOAT_T)
    assert any(i.code == "incomplete_parameters" and words in i.message for i in issues), issues


def test_qlinearmul_between_matmul_and_activation_is_not_adjacent(tmp_path):
    """Only a QLinearAdd is a bias; a QLinearMul there is not absorbed."""
    m = onnx.load(DIGITS / "digits_matmul_qop_s8s8_pt.onnx")
    for n in m.graph.node:
        if n.name == "Add_quant":
            n.op_type = "QLinearMul"
    p = tmp_path / "mul.onnx"
    onnx.save(m, p)
    r = compile_model(p, "bitwise", FLOAT_T)
    s = next(s for s in r.sites if "Add_quant" in s.nodes)
    assert s.verdict == "rejected" and s.reason.code == "not_adjacent"
    assert "'Add_quant'" in s.reason.message


def test_target_bias_field_is_validated():
    import tomllib

    data = tomllib.loads(Path("npu_backend/targets/npu_float.toml").read_text())
    assert FLOAT_T.compute("MatMul").bias == {"accumulator", "requantized"}
    assert FIXED_T.compute("MatMul").bias == {"accumulator"}
    data["compute"]["MatMul"]["bias"] = ["somewhere"]
    with pytest.raises(TargetError, match="bias"):
        parse_target(data)


def test_qdq_sites_under_both_readings():
    """The default (integer) reading proves the QDQ u8s8 sites as ORT's QLinearMatMul ->
    QLinearAdd -> QLinearSigmoid; the float reading keeps them on the host with their own
    reason code; an int8 float bias Add (ORT keeps it float) gets a verdict naming it."""
    u8 = DIGITS / "digits_matmul_qdq_u8s8_pc.onnx"
    r = compile_model(u8, "bitwise", FLOAT_T)
    assert [(s.pattern, s.verdict) for s in r.sites] == [
        ("matmul+qlinearadd+sigmoid", "proven")
    ] * 2
    assert r.sites[0].nodes == ["MatMul", "Add", "Sigmoid"]
    r = compile_model(u8, "bitwise", FLOAT_T, reference="onnx-qdq-float")
    assert r.sites and all(s.reason.code == "float_accumulation" for s in r.sites)


def test_float_qdq_bias_add_is_fused_against_orts_own_tables(digits):
    """ORT keeps the s8s8 bias as float DQ -> Add -> Q: its per-column tables come from ORT,
    the add stage is proven against them, and the program equals ORT at its default level."""
    model = DIGITS / "digits_matmul_qdq_s8s8_pt.onnx"
    r = compile_model(model, "bitwise", FLOAT_T, reference="ort-host")
    assert len(r.sites) == 2 and all(s.verdict == "proven" and s.applied for s in r.sites)
    assert r.sites[0].float_bias is not None and len(r.sites[0].float_bias.tables) == 64
    assert (
        "intercepts_DequantizeLinear"
        in r.graph.nodes[[n.op for n in r.graph.nodes].index("fused")].origin
    )
    got = run_batched(generate(r.lowered, FLOAT_T), {"input": digits})[0]
    want = _ort(model, digits)
    assert all(np.array_equal(np.asarray(got[k]), v) for k, v in want.items())
    # negative: one wrong entry in ORT's table is caught by the prover (refuted)
    s = r.sites[0]
    grp = s.post[0]
    j = grp.columns[0]
    fb = s.float_bias
    t = list(fb.tables[j])
    rq = s.compute.attrs["requant"]
    k = int(rq["zp"]) - int_type(rq["out"]).min  # x at acc = 0: reachable in every column
    t[k] += 1 if t[k] < 255 else -1
    fb.tables = tuple(tuple(t) if c == j else fb.tables[c] for c in range(len(fb.tables)))
    a = s.compute.attrs
    rng = accumulator_range(
        a["w"], np.asarray(a["w_zp"]), int_type(a["a_type"]), int(a["a_zp"]), a["bias"]
    )
    bad = build_columns(s, FLOAT_T)
    g2 = next(g for g in bad if j in g.columns)
    ranges = {"acc": (int(rng.lo[j]), int(rng.hi[j]))}
    v = check(Obligation("epilogue", g2.before, g2.after(Var("acc")), ranges, Policy(0)))
    assert v.status == "refuted"


def _first_layer(tmp_path) -> Path:
    """The digits s8s8 QOperator model cut after its first Sigmoid (a terminal site)."""
    from onnx import TensorProto, helper

    m = onnx.load(DIGITS / "digits_matmul_qop_s8s8_pt.onnx")
    g = m.graph
    k = [n.name for n in g.node].index("Sigmoid_quant")
    keep = list(g.node)[: k + 1]
    del g.node[:]
    g.node.extend(keep)
    del g.output[:]
    g.output.extend(
        [helper.make_tensor_value_info(keep[-1].output[0], TensorProto.INT8, ["N", 64])]
    )
    used = {i for n in keep for i in n.input}
    inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    p = tmp_path / "first_layer.onnx"
    onnx.save(m, p)
    return p


def test_folded_bias_proven_under_bounded_where_it_is_terminal(tmp_path, digits):
    """At a graph output, bounded:N applies: the folded bias is proven with the reached
    difference (5 steps), refuted below it, and the program stays within it on real data."""
    model = _first_layer(tmp_path)
    r = compile_model(model, "bounded:4", FIXED_T, synthesis=False)
    assert [s.verdict for s in r.sites] == ["refuted"]
    r = compile_model(model, "bounded:8", FIXED_T, synthesis=False)
    (s,) = r.sites
    assert s.verdict == "proven" and s.applied and s.max_diff == 5
    prog = generate(r.lowered, FIXED_T)
    got = run_batched(prog, {"input": digits})[0]
    (name,) = got
    want = _ort(model, digits)[name]
    diff = np.abs(got[name].astype(np.int64) - want.astype(np.int64))
    assert 0 < diff.max() <= 5
