"""`compiler.ir.npu_step.compute_kind`: the one answer to "which target unit runs this
compute node", read by legality, synthesis, structure and lowering alike (legality had its
own copy that also read a host QDQ group's `compute` attribute; the two must not drift)."""

from __future__ import annotations

from pathlib import Path

import pytest
from models import conv_activation

from compiler.frontend.reader import to_ir
from compiler.ir.graph import Node
from compiler.ir.npu_step import compute_kind
from compiler.ort.reference_host import resolve_reference
from compiler.passes.propose import is_compute

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"


def _computes(model, reference="onnx"):
    g, _ = to_ir(model, reference=resolve_reference(reference))
    return [n for n in g.nodes if is_compute(n)]


@pytest.mark.parametrize(
    "stem,reference,op",
    [
        ("digits_matmul_qop_s8s8_pt", "onnx", "matmul"),  # QLinearMatMul
        ("digits_gemm_qop_s8s8_pt", "onnx", "matmul"),  # QGemm: kind Gemm
        ("digits_gemm_qdq_s8s8_pt", "onnx-qdq-float", "host_onnx"),  # float Gemm group
        ("digits_matmul_qdq_s8s8_pt", "onnx-qdq-float", "host_onnx"),
    ],
)
def test_matmul_and_gemm_run_on_the_matmul_unit(stem, reference, op):
    nodes = _computes(DIGITS / f"{stem}.onnx", reference)
    assert nodes and {n.op for n in nodes} == {op}
    assert {compute_kind(n) for n in nodes} == {"MatMul"}


def test_pointwise_conv_runs_on_the_conv_unit():
    (n,) = _computes(conv_activation())
    assert n.attrs["kind"] == "Conv" and compute_kind(n) == "Conv"


@pytest.mark.parametrize(
    "attrs,kind",
    [
        ({}, "MatMul"),
        ({"kind": None}, "MatMul"),
        ({"kind": "Gemm"}, "MatMul"),
        ({"kind": "Conv"}, "Conv"),
        ({"compute": "Gemm"}, "MatMul"),  # a host QDQ group names its op in `compute`
        ({"compute": "Conv"}, "Conv"),  # ... which is not assumed to be a MatMul
        ({"kind": "Conv", "compute": "MatMul"}, "Conv"),  # a lowered node's own kind wins
    ],
)
def test_kind_from_attributes(attrs, kind):
    assert compute_kind(Node("n", "host_onnx", ["x"], ["y"], dict(attrs))) == kind
