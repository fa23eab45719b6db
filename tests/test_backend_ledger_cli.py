"""`npuc compile --report`: the ledger's per-model total and the "costs more than it saves" flag."""

from __future__ import annotations

import json

import pytest
from cli_helpers import npuc
from models import _activation, const, make, weights
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import save


def siblings(path, second: str):
    """x -> QLinearMatMul -> Sigmoid and x -> QLinearMatMul -> `second`, one requantizer.

    Unfused, both MatMuls requantize alike and share one parameter record; fused, a Tanh
    site needs a record of its own: a parameter load more than the standalone activation
    it removes costs, on npu_float."""
    inits = [
        const("W1", weights(16, 4, 1), "int8"),
        const("W2", weights(16, 4, 2), "int8"),
        const("a_s", 0.02, "float32"),
        const("z", 0, "int8"),
        const("w_s", 0.01, "float32"),
        const("y_s", 0.05, "float32"),
    ]
    nodes = []
    for i, kind, form in ((1, "sigmoid", "qlinear"), (2, second, "qdq")):
        mm_in = ["x", "a_s", "z", f"W{i}", "w_s", "z", "y_s", "z"]
        nodes.append(oh.make_node("QLinearMatMul", mm_in, [f"h{i}"], name=f"mm{i}"))
        out_q = (1 / 256, -128) if kind == "sigmoid" else (1 / 128, 0)
        nodes += _activation(kind, form, f"h{i}", f"y{i}", f"act{i}", (0.05, 0), out_q, inits)
    outs = [oh.make_tensor_value_info(f"y{i}", TP.INT8, [1, 4]) for i in (1, 2)]
    save(make(nodes, [oh.make_tensor_value_info("x", TP.INT8, [1, 16])], outs, inits), path)
    return path


def _compile(tmp_path, second: str, report: str = "r.json"):
    model = siblings(tmp_path / f"sib_{second}.onnx", second)
    rep = tmp_path / report
    r = npuc(
        "compile", model, "-o", tmp_path / "p.npuprog", "--report", rep, "--proofs-mode", "off"
    )
    assert r.returncode == 0, r.stderr
    return r, rep


def test_report_flags_the_fusion_that_costs_more(tmp_path):
    r, rep = _compile(tmp_path, "tanh")
    ledger = json.loads(rep.read_text())["ledger"]
    first, second = ledger["fusions"]
    assert (first["costs_more"], second["costs_more"]) == (False, True)
    assert second["cycles_after"] > second["cycles_before"]
    assert second["param_loads_added"] == 1
    total = ledger["total"]
    assert total["costing_more"] == ["mm2"] and total["cost_basis"] == "cycles"
    before, after = total["counters_before"], total["counters_after"]
    assert total["saved"] == before["cycles"] - after["cycles"]
    assert "mm2" in r.stdout and "costs more than it saves" in r.stdout


def test_no_flag_when_every_fusion_pays(tmp_path):
    r, rep = _compile(tmp_path, "sigmoid")
    ledger = json.loads(rep.read_text())["ledger"]
    assert [e["costs_more"] for e in ledger["fusions"]] == [False, False]
    assert ledger["total"]["costing_more"] == [] and ledger["total"]["saved"] > 0
    assert "costs more" not in r.stdout


@pytest.mark.parametrize("name", ["r.md"])
def test_markdown_report_shows_the_ledger(tmp_path, name):
    _, rep = _compile(tmp_path, "tanh", name)
    text = rep.read_text()
    assert "## Ledger" in text
    row = next(line for line in text.splitlines() if line.startswith("| mm2 "))
    assert "costs more" in row
