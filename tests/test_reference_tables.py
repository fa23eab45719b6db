"""Activation tables come from the kernel model and the reference profile, not the host.

The conformance half compares the model (with this host's MLAS FMA flag) with the tables
the host's ONNX Runtime computes; the profile half shows the frontend's table follows
the profile's `mlas_fma` whatever the host runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from qdq_models import ort_run, qdq_table_model

from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile
from compiler.ort.tables import TableSpec, ort_table, reference_table
from prover.mlas import host_uses_fma
from prover.reference import ONNX

FUSED = host_uses_fma()
NO_FMA = dataclasses.replace(ONNX, name="test-no-fma", mlas_fma=False)
# A QDQ Sigmoid (int8, zero points 0 / -128) whose entry at x = 1 differs between MLAS's
# FMA and non-FMA logistic kernels.
FMA_SPLIT = dict(x_scale=2.876159191131592, x_zp=0, y_scale=0.009235660545527935, y_zp=-128)


def _pairs(rng, n):
    for _ in range(n):
        it, ot = (("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"))[rng.integers(3)]
        ii, oi = np.iinfo(it), np.iinfo(ot)
        yield (
            float(np.float32(10 ** rng.uniform(-3, 0))),
            int(rng.integers(ii.min, ii.max + 1)),
            it,
            float(np.float32(10 ** rng.uniform(-3.5, -1))),
            int(rng.integers(oi.min, oi.max + 1)),
            ot,
        )


@pytest.mark.parametrize(
    "form, op",
    [
        ("qlinear", "QLinearSigmoid"),
        ("qlinear", "QLinearLeakyRelu"),
        ("qdq", "Sigmoid"),
        ("qdq", "Tanh"),
        ("qdq", "Relu"),
    ],
)
def test_model_tables_equal_host_onnxruntime(form, op):
    rng = np.random.default_rng(len(op))
    for xs, xz, it, ys, yz, ot in _pairs(rng, 25):
        if form == "qlinear":
            ot, yz = it, int(np.clip(yz, np.iinfo(it).min, np.iinfo(it).max))
        alpha = 0.1 if op == "QLinearLeakyRelu" else None
        spec = TableSpec(form, op, xs, xz, it, ys, yz, ot, alpha)
        want = ort_table(spec)
        got = reference_table(spec, fma=FUSED)
        assert got == want, (xs, xz, it, ys, yz, ot)


def test_fma_split_case_tells_the_kernels_apart():
    spec = TableSpec("qdq", "Sigmoid", FMA_SPLIT["x_scale"], 0, "int8", FMA_SPLIT["y_scale"], -128, "int8")  # fmt: skip
    host = ort_table(spec)
    assert reference_table(spec, fma=FUSED) == host
    assert reference_table(spec, fma=not FUSED) != host


@pytest.mark.parametrize("profile", [ONNX, NO_FMA], ids=lambda p: p.name)
def test_frontend_table_follows_the_profile_not_the_host(profile):
    m = qdq_table_model("Sigmoid", **FMA_SPLIT)
    g, _ = to_ir(m, reference=profile)
    lut = next(n for n in g.nodes if n.op == "lut")
    want = reference_table(
        TableSpec("qdq", "Sigmoid", FMA_SPLIT["x_scale"], 0, "int8", FMA_SPLIT["y_scale"], -128, "int8"),
        fma=profile.mlas_fma,
    )  # fmt: skip
    assert tuple(lut.attrs["table"]) == want
    feeds = {"x": np.arange(-128, 128, dtype=np.int8)}
    same = profile.mlas_fma == FUSED
    assert np.array_equal(run_graph(g, feeds)["y"], ort_run(m, feeds)[0]) == same


def test_default_reference_is_the_onnx_profile_and_host_profile_matches_ort():
    m = qdq_table_model("Sigmoid", **FMA_SPLIT)
    default = next(n for n in to_ir(m)[0].nodes if n.op == "lut").attrs["table"]
    onnx_t = next(n for n in to_ir(m, reference=ONNX)[0].nodes if n.op == "lut").attrs["table"]
    assert tuple(default) == tuple(onnx_t)
    g, _ = to_ir(m, reference=host_profile())
    feeds = {"x": np.arange(-128, 128, dtype=np.int8)}
    np.testing.assert_array_equal(run_graph(g, feeds)["y"], ort_run(m, feeds)[0])
