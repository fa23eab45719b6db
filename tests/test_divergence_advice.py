"""Issue 24: the `reference_divergence` advice names what the model is. ORT on x86 moves QDQ
int8 activations to uint8, so an s8s8 QDQ model holds u8s8 matmuls in the IR: the advice
must not tell its user to "use int8 x int8 (s8s8)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.api import compile_model

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits"


def _advice(name: str) -> str:
    r = compile_model(str(DIGITS / name), reference="onnx")
    found = [f for f in r.context.findings if f["code"] == "reference_divergence"]
    assert found
    return found[0]["message"]


@pytest.fixture(scope="module")
def s8s8_qdq() -> str:
    return _advice("digits_matmul_qdq_s8s8_pt.onnx")


def test_s8s8_qdq_advice_says_ort_runs_u8s8(s8s8_qdq):
    assert "is int8 x int8 (s8s8) as written" in s8s8_qdq
    assert "moves QDQ int8 activations to uint8" in s8s8_qdq
    assert "use int8 x int8" not in s8s8_qdq
    assert "reduce_range" in s8s8_qdq and "ort-x86-avx2" in s8s8_qdq


def test_advice_follows_the_written_activation_type():
    """Read only (no proof): the QOperator u8s8 model keeps the s8s8 advice, the u8s8 QDQ
    model gets the QDQ one (s8s8 QDQ would run the same kernel on x86)."""
    from compiler.frontend.reader import to_ir
    from compiler.proving import divergence

    for name, want in [
        ("digits_matmul_qop_u8s8_pt.onnx", divergence.REMEDY),
        ("digits_matmul_qdq_u8s8_pt.onnx", divergence.QDQ_REMEDY),
        ("digits_matmul_qdq_s8s8_pt.onnx", divergence.S8_QDQ_REMEDY),
    ]:
        g, _ = to_ir(DIGITS / name)
        (mm, *_) = [n for n in g.nodes if divergence.saturable_columns(n)]
        assert divergence.remedy(g, mm) == want, name
