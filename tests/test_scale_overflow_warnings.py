"""A huge or subnormal scale overflows float32 products to +-inf exactly as in ONNX
Runtime (the table or requantized value saturates): the tools compute it knowingly, so a
successful check prints no numpy RuntimeWarning, and the verdict and program stay right."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from prover.inttypes import int_type
from prover.lut import build_ort_leaky_relu_table, build_ort_sigmoid_table
from prover.requant import requant_float_concrete
from tests.cli_helpers import assert_run_equals_ort, npuc, prover
from tests.models import matmul_activation, random_inputs

SUBNORMAL = 1e-40  # below float32's smallest normal (1.2e-38)
HUGE = 3.4e38  # near float32's largest finite value

CASES = {
    "subnormal_y_scale": (dict(y_scale=SUBNORMAL), "PROVEN"),  # requant product overflows
    "huge_a_scale": (dict(a_scale=HUGE), "PROVEN"),  # requant product overflows
    "huge_y_scale": (dict(y_scale=HUGE), "PROVEN"),  # the table's dequantize overflows
    # the target's LeakyRelu builder cannot take these scales, but its table unit loads
    # ORT's own table (a unary region's table), which is then proven
    "leakyrelu_subnormal_out": (dict(activation="leakyrelu", out_scale=SUBNORMAL), "PROVEN"),
    "leakyrelu_huge_in": (dict(activation="leakyrelu", y_scale=HUGE), "PROVEN"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_stderr_is_clean(tmp_path: Path, name):
    kw, verdict = CASES[name]
    path = tmp_path / "m.onnx"
    onnx.save(matmul_activation(**kw), path)
    r = prover("check", path, "--proofs-mode", "off")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # was "RuntimeWarning: overflow encountered in multiply" lines
    assert r.stdout.splitlines()[1].startswith(verdict)


@pytest.mark.parametrize(
    "name", ["subnormal_y_scale", "huge_y_scale", "leakyrelu_subnormal_out", "leakyrelu_huge_in"]
)
def test_program_equals_ort(tmp_path: Path, name):
    m = matmul_activation(**CASES[name][0])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    c = npuc("compile", path, "-o", tmp_path / "p.npz", "--proofs-mode", "off")
    assert c.returncode == 0 and c.stderr == "", c.stderr
    x = random_inputs(m, seed=1, n=64)
    np.savez(tmp_path / "in.npz", **x)
    assert_run_equals_ort(tmp_path / "p.npz", tmp_path / "in.npz", path, x, tmp_path / "o.npz")


def test_kernels_saturate_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = requant_float_concrete(np.array([-5, 0, 5]), np.float32(HUGE), 0, int_type("int8"))
        assert got.tolist() == [-128, 0, 127]
        sig = build_ort_sigmoid_table(HUGE, 0, "int8", 1 / 256, -128, "int8")
        assert sig.min() == -128 and sig.max() == 127  # sigmoid(-inf) = 0, sigmoid(inf) = 1
        leaky = build_ort_leaky_relu_table(0.05, 0, "int8", SUBNORMAL, 0, "int8")
        assert leaky[:128].max() <= 0 and set(leaky[129:].tolist()) == {127}
