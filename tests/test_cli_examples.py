"""The shipped examples: regenerated bit for bit by their script, and the verdicts the README states."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_helpers import EXAMPLES, REPO

from compiler.api import compile_model

# model -> {ONNX nodes of a site: (verdict, reason code or None)} on the default target, bitwise
EXPECTED = {
    "matmul_sigmoid.onnx": {("mm", "sig"): ("proven", None)},
    "matmul_requantize_sigmoid.onnx": {
        ("mm", "requant", "sig"): ("rejected", "intervening_requantize")
    },
    "matmul_clip_sigmoid.onnx": {("mm", "clip", "sig"): ("proven", None)},
    "multi_user.onnx": {("mm", "sig"): ("rejected", "multiple_users")},
    "double_activation.onnx": {
        ("mm", "sig1"): ("proven", None),
        ("mm", "sig1", "sig2"): ("rejected", "already_fused"),
    },
    "layout_transpose.onnx": {("mm", "transpose", "sig"): ("rejected", "layout_mismatch")},
    "ort_quantized_matmul_sigmoid.onnx": {("mm_quant", "sig_quant"): ("proven", None)},
    "showcase.onnx": {
        ("mm_ok", "sig_ok"): ("proven", None),
        ("mm_lut", "sig_lut"): ("refuted", "refuted"),
        ("mm_shared", "sig_shared"): ("rejected", "multiple_users"),
        ("mm_t", "transpose", "sig_t"): ("rejected", "layout_mismatch"),
    },
}


def test_committed_examples_are_what_the_script_builds():
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_examples.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_verdicts(name):
    result = compile_model(str(EXAMPLES / name))
    got = {
        tuple(s.nodes): (s.verdict, None if s.reason is None else s.reason.code)
        for s in result.sites
    }
    assert got == EXPECTED[name]


def test_ort_quantized_model_was_made_by_onnxruntime():
    import onnx

    m = onnx.load(EXAMPLES / "ort_quantized_matmul_sigmoid.onnx")
    ops = [n.op_type for n in m.graph.node]
    assert ops == ["QuantizeLinear", "QLinearMatMul", "QLinearSigmoid", "DequantizeLinear"]
    assert m.producer_name == "onnx.quantize"
