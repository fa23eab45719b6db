"""Semantic gate: per-site verdicts from the prover, whole-model counterexamples replayed."""

from __future__ import annotations

import numpy as np
import pytest
from models import matmul_activation, two_sites

from compiler.api import compile_model
from compiler.errors import InternalError
from compiler.ort.tables import session
from npu_backend.postprocess import apply_columns
from npu_backend.target import load_target
from prover.matmul import matmul_acc

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def check_cex(r, site, model):
    cx = site.counterexample
    assert cx is not None and cx.inputs is not None
    assert cx.before != cx.after
    name, idx = cx.element["value"], tuple(cx.element["index"])
    assert int(cx.expected[name][idx]) == cx.before
    assert int(cx.actual[name][idx]) == cx.after
    if cx.expected_by == "onnxruntime":
        ort = session(model).run(None, cx.inputs)
        for o, v in zip(model.graph.output, ort, strict=True):
            np.testing.assert_array_equal(v, cx.expected[o.name])
    return cx


def test_refuted_counterexample_replays_on_whole_model():
    m = matmul_activation(K=64, N=16)
    r = compile_model(m, "bitwise", FIXED, synthesis=False)
    (s,) = r.sites
    assert s.verdict == "refuted" and s.reason.code == "refuted"
    cx = check_cex(r, s, m)
    assert cx.expected_by == "onnxruntime" and set(cx.inputs) == {"x"}
    # independently: the fused descriptor applied to the real accumulator gives `after`
    W = r.original.nodes[0].attrs["w"]
    acc = matmul_acc(cx.inputs["x"], W)
    post = [g.post for g in s.post if cx.element["column"] in g.columns][0]
    assert int(apply_columns(post, acc[..., [cx.element["column"]]])[0, 0]) == cx.after
    assert int(acc[0, cx.element["column"]]) == cx.assignment["acc"]
    # the refuted site is not applied
    assert not any(n.op == "fused" for n in r.graph.nodes)


def test_refutation_lifted_through_quantize_linear_to_float_inputs():
    m = matmul_activation(K=32, N=8, float_input=True)
    r = compile_model(m, "bitwise", FIXED, synthesis=False)
    (s,) = r.sites
    assert s.verdict == "refuted"
    cx = check_cex(r, s, m)
    assert cx.inputs["x_f"].dtype == np.float32


def test_refutation_in_project_domain_model_uses_ir_reference(tmp_path):
    text = (FIXED.path and open(FIXED.path).read()).replace(
        'rounding = "half_away"', 'rounding = "toward_zero"'
    )
    p = tmp_path / "truncating.toml"
    p.write_text(text.replace('name = "npu_fixed"', 'name = "npu_truncating"'))
    t = load_target(p)
    m = matmul_activation(form="integer")
    r = compile_model(m, "bitwise", t)
    (s,) = r.sites
    assert s.verdict == "refuted"
    cx = check_cex(r, s, m)
    assert cx.expected_by == "ir-reference"


def test_bounded_policy_proves_what_bitwise_refutes():
    m = matmul_activation(K=64, N=16, y_scale=0.01)
    bit = compile_model(m, "bitwise", FIXED, synthesis=False).sites[0]
    b1 = compile_model(m, "bounded:1", FIXED).sites[0]
    assert (
        bit.verdict == "refuted" and abs(bit.counterexample.before - bit.counterexample.after) == 1
    )
    assert b1.verdict == "proven" and b1.max_diff == 1


def test_float_target_proves_bitwise():
    s = compile_model(matmul_activation(K=64, N=16), "bitwise", FLOAT).sites[0]
    assert s.verdict == "proven" and s.max_diff == 0 and s.obligations


def test_one_verdict_per_site():
    m = two_sites(second_scale=0.01)
    r = compile_model(m, "bounded:1", FIXED, synthesis=False)
    assert [s.id for s in r.sites] == ["site-0", "site-1"]
    assert [s.nodes for s in r.sites] == [["mm1", "act1"], ["mm2", "act2"]]
    assert [s.verdict for s in r.sites] == ["refuted", "proven"]
    assert r.summary == {"candidates": 2, "proven": 1, "refuted": 1, "unknown": 0, "rejected": 0}
    fused = [n for n in r.graph.nodes if n.op == "fused"]
    assert [n.origin for n in fused] == [("mm2", "act2")]


def test_identical_parameter_sets_proved_once():
    scales = [0.01, 0.02] * 4
    m = matmul_activation(N=8, per_channel=True, w_scale=scales)
    r = compile_model(m, "bitwise", FLOAT, solver="segments")
    (s,) = r.sites
    assert s.verdict == "proven"
    assert len(set(s.obligations)) == 2
    assert len(s.post) == 2 and sorted(len(g.columns) for g in s.post) == [4, 4]
    # auto: both groups are identities (the NPU's table and requantization are the
    # reference's), proven as one family of the 8 columns
    (f,) = compile_model(m, "bitwise", FLOAT).sites
    assert f.verdict == "proven" and f.solver == "identity" and len(f.obligations) == 1
    assert f.max_diff == 0 and len(f.post) == 2


@pytest.mark.parametrize("form,pattern", [("qdq", "matmul+sigmoid"), ("qdq_gemm", "gemm+sigmoid")])
def test_qdq_float_matmul_is_unknown_never_a_pass(form, pattern):
    """Under the float QDQ reading the group's float sum is no integer epilogue: its own
    reason code (float_accumulation) with an action, never a pass."""
    r = compile_model(matmul_activation(form=form), "bitwise", FLOAT, reference="onnx-qdq-float")
    (s,) = r.sites
    assert s.pattern == pattern
    assert s.verdict == "unknown" and s.reason.code == "float_accumulation"
    assert "float32" in s.reason.message and "onnx-qdq-float" in s.reason.message
    assert "reference" in s.reason.action
    assert not any(n.op == "fused" for n in r.graph.nodes)


def test_unreproduced_refutation_is_an_internal_error(monkeypatch):
    import compiler.passes.gate as gate

    monkeypatch.setattr(gate, "apply_site", lambda g, site, groups, structure="plain": None)
    with pytest.raises(InternalError, match="does not reproduce"):
        compile_model(matmul_activation(K=64, N=16), "bitwise", FIXED, synthesis=False)


def test_site_report_fields():
    from compiler.report.json_form import site_json
    from compiler.report.model import SiteReport

    r = compile_model(matmul_activation(K=64, N=16), "bitwise", FIXED, synthesis=False)
    d = site_json(SiteReport.of(r.sites[0]))
    for k in ("id", "pattern", "nodes", "verdict", "reason", "time_ms", "counterexample"):
        assert k in d
    assert d["obligation"] == r.sites[0].obligation_hash in r.sites[0].obligations
    assert d["reason"]["code"] == "refuted" and d["reason"]["action"]
    assert d["counterexample"]["inputs"]["x"]["data"]
    assert d["counterexample"]["local"]["acc"] == r.sites[0].counterexample.assignment["acc"]
