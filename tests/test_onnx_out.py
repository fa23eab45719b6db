"""`npuc compile --onnx-out FILE` (issue 26): the compiled graph as a valid ONNX model (the
checker accepts it), each NPU step a node of the project's domain naming the ops it fuses
and, for a fusion, the proof obligations it rests on; host ops as the model has them."""

from __future__ import annotations

import json

import onnx
import pytest
from cli_helpers import EXAMPLES, npuc
from onnx import helper as oh

from compiler.report.onnx_out import DOMAIN


@pytest.fixture(scope="module")
def showcase(tmp_path_factory):
    d = tmp_path_factory.mktemp("onnx_out")
    view, rep = d / "showcase_npu.onnx", d / "r.json"
    r = npuc("compile", EXAMPLES / "showcase.onnx", "-o", d / "p.npuprog", "--onnx-out", view,
             "--report", rep, "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"wrote {view} (ONNX view of the compiled graph, " in r.stdout
    return onnx.load(view), json.loads(rep.read_text())


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: oh.get_attribute_value(a) for a in node.attribute}


def _text(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [_text(x) for x in v]
    return v


def test_the_checker_accepts_it(showcase):
    model, _ = showcase
    onnx.checker.check_model(model)
    assert {d.domain for d in model.opset_import} >= {"", DOMAIN, "com.microsoft"}
    original = onnx.load(EXAMPLES / "showcase.onnx")
    assert [v.name for v in model.graph.input] == [v.name for v in original.graph.input]
    assert [v.name for v in model.graph.output] == [v.name for v in original.graph.output]


def test_npu_nodes_name_the_fused_ops_and_their_proofs(showcase):
    model, report = showcase
    npu = {n.name: n for n in model.graph.node if n.domain == DOMAIN}
    fused = _attrs(npu["mm_ok"])
    assert npu["mm_ok"].op_type == "NpuMatMul" and fused["fused"] == 1
    assert _text(fused["fused_ops"]) == ["mm_ok", "sig_ok"]
    site0 = next(s for s in report["sites"] if s["id"] == "site-0")
    assert _text(fused["proof_obligations"]) == [site0["obligation"]]
    assert _text(fused["site_verdict"]) == "proven" and _text(fused["activation"]) == "sigmoid"
    unfused = _attrs(npu["mm_lut"])  # the refuted fusion: the matmul alone, no proof claimed
    assert unfused["fused"] == 0 and "proof_obligations" not in unfused
    assert _text(unfused["site_verdict"]) == "refuted"
    assert npu["sig_t"].op_type == "NpuLut" and len(_attrs(npu["sig_t"])["table"]) == 256


def test_host_ops_stay_as_they_are(showcase):
    model, _ = showcase
    host = {n.name: n for n in model.graph.node if n.domain != DOMAIN}
    assert host["sig_lut"].op_type == "QLinearSigmoid" and host["sig_lut"].domain == "com.microsoft"
    assert "host" in host["sig_lut"].doc_string
    npu = {n.name: n for n in model.graph.node if n.domain == DOMAIN}
    # the showcase's Transpose of an NPU result is an NPU gather (its index map proven)
    moved = [n for n in npu.values() if n.op_type == "NpuMove"]
    assert moved and all("transpose" in _text(_attrs(n)["fused_ops"]) for n in moved)
