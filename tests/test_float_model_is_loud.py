"""A float (unquantized) model is loud: a `float_compute` finding naming the float compute
ops and the missing quantize step, a one-line warning, and a gate that fails with exit 7
(`--require-quantized`, always on in a read-only proof gate) — on the digits float models."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import npuc, prover

from compiler.frontend.reader import to_ir
from compiler.ir.float_compute import float_compute_finding

ROOT = Path(__file__).resolve().parent.parent
FLOAT = [ROOT / "examples/digits" / f"digits_{k}_float.onnx" for k in ("matmul", "gemm")]
QUANTIZED = ROOT / "examples/digits/digits_matmul_qop_s8s8_pt.onnx"


@pytest.mark.parametrize("model", FLOAT, ids=lambda p: p.stem)
def test_a_float_model_gets_a_finding_and_a_warning(model: Path) -> None:
    r = prover("check", str(model), "--format", "json", "--proofs-mode", "off")
    assert r.returncode == 0  # a finding, not a failure, unless a gate asks
    found = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "float_compute"]
    assert len(found) == 1 and "not quantized" in found[0]["message"]
    assert len(found[0]["float_ops"]) == 3 and "quantize_static" in found[0]["message"]
    warnings = [x for x in r.stderr.splitlines() if "warning:" in x]
    assert len(warnings) == 1 and "float on the host" in warnings[0]


@pytest.mark.parametrize("model", FLOAT, ids=lambda p: p.stem)
def test_the_gate_fails_on_a_float_model(model: Path, tmp_path: Path) -> None:
    r = prover("check", str(model), "--require-quantized", "--proofs-mode", "off")
    assert r.returncode == 7 and "gate fails: exit 7" in r.stderr
    ro = prover("check", str(model), "--proofs", str(tmp_path), "--proofs-mode", "ro")
    assert ro.returncode == 7
    out = tmp_path / "p.npu"
    c = npuc("compile", str(model), "-o", str(out), "--require-quantized", "--proofs-mode", "off")
    assert c.returncode == 7 and not out.exists()


def test_a_quantized_model_passes_the_gate() -> None:
    r = prover("check", str(QUANTIZED), "--require-quantized", "--proofs-mode", "off")
    assert r.returncode == 0 and "warning:" not in r.stderr


def test_a_partly_quantized_model_says_which_part() -> None:
    """The QDQ model with one float MatMul ORT leaves as written: part of the model."""
    g, _ = to_ir(ROOT / "examples/digits/digits_matmul_qop_s8s8_pt.onnx")
    assert float_compute_finding(g) is None
    g, _ = to_ir(FLOAT[0])
    f = float_compute_finding(g)
    assert f is not None and f["message"].startswith("the model is not quantized: 3 compute ops")


def test_a_qdq_group_ort_keeps_in_float_is_named_as_such() -> None:
    """A quantized (QDQ) Conv whose float weights ORT quantizes without making an integer
    kernel: float compute, but the model is not 'unquantized' and the advice says so."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_host_steps_default_session import qdq_float_conv

    g, _ = to_ir(qdq_float_conv())
    f = float_compute_finding(g)
    assert f is not None and f["float_ops"] == [{"node": "conv", "op": "Conv", "qdq": True}]
    assert f["message"].startswith("ONNX Runtime's default session runs 1 quantized (QDQ)")
    assert "not quantized" not in f["message"]


def test_the_library_carries_the_finding_too() -> None:
    """`compile_model` callers (not only the CLIs) get the finding, from the gate pass."""
    from compiler.api import compile_model

    r = compile_model(FLOAT[0], "bitwise", proofs_mode="off")
    assert r.context is not None
    assert [f["code"] for f in r.context.findings] == ["float_compute"]
    q = compile_model(QUANTIZED, "bitwise", proofs_mode="off")
    assert q.context is not None and not q.context.findings
