"""The compiler synthesises fixed-point parameters where rounding the scale is refuted.

On `npu_fixed` (double rounding; the target declares multiplier, shift, zero point and
table choosable) the digits MLP's per-tensor QGemm Sigmoid sites are refuted with rounded
parameters, fused with synthesised ones (each proven), and the program equals ONNX Runtime
on the 360 test digits; the per-channel sites keep groups for which no parameters exist,
and the report names the conflicting accumulator pair. The MatMul+QLinearAdd variant is
proven too, but its column groups need different tables and the postprocessor holds one
table per MatMul, so lowering keeps it on the host.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from compiler.api import compile_model
from compiler.passes.fixed_synthesis import summary
from npu_backend.codegen import generate
from npu_backend.lowered import NpuMatMul
from npu_backend.postprocess import posts_of
from npu_backend.runner import run_batched
from npu_backend.target import TargetError, load_target, parse_target

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _requant(site) -> list[dict]:
    return next(d["requant"] for d in site.details if "requant" in d)


def _ort(path, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {"input": x}), strict=True))


def test_target_declares_what_the_compiler_may_choose():
    caps = FIXED.compute("MatMul")
    assert caps.synthesis == frozenset({"multiplier", "shift", "zero_point", "table"})
    assert load_target("npu_backend/targets/npu_float.toml").compute("MatMul").synthesis == set()
    data = tomllib.loads(Path("npu_backend/targets/npu_fixed.toml").read_text())
    data["compute"]["MatMul"]["synthesis"] = ["offset", "multiplier"]
    with pytest.raises(TargetError, match="synthesis"):
        parse_target(data)
    data["compute"]["MatMul"]["synthesis"] = ["multiplier", "shift", "table"]
    data["compute"]["MatMul"]["requant_scheme"] = "float32"
    with pytest.raises(TargetError, match="synthesis"):
        parse_target(data)


@pytest.fixture(scope="module")
def per_tensor():
    return compile_model(DIGITS / "digits_gemm_qop_s8s8_pt.onnx", "bitwise", FIXED,
                         reference="ort-host", synthesis=True)  # fmt: skip


def test_per_tensor_sites_fuse_with_synthesised_parameters(per_tensor):
    r = per_tensor
    assert [s.verdict for s in r.sites] == ["proven", "proven"]
    assert all(s.applied for s in r.sites)
    for s in r.sites:
        kinds = {o["kind"] for o in _requant(s)}
        assert kinds == {"synthesised"}, kinds
        assert "synthesised" in summary(s)
        # the fused posts carry the synthesised fixed-point parameters and no clip
    fused = [st for st in r.lowered.steps if isinstance(st, NpuMatMul) and st.fused]
    assert len(fused) == 2
    for st in fused:
        for p in posts_of(st.post):
            assert p.requant.scheme == "fixed_double" and p.clip is None


def test_per_tensor_program_equals_onnx_runtime_on_the_test_digits(per_tensor):
    x = np.load(DIGITS / "digits_test.npz")["input"]
    got = run_batched(generate(per_tensor.lowered, FIXED), {"input": x})[0]
    want = _ort(DIGITS / "digits_gemm_qop_s8s8_pt.onnx", x)
    for k, v in want.items():
        assert np.array_equal(np.asarray(got[k]), v), k


def test_without_a_declared_space_rounding_stays_refuted():
    caps = dataclasses.replace(FIXED.compute("MatMul"), synthesis=frozenset())
    tgt = dataclasses.replace(
        FIXED, computes=tuple(caps if c.op == "MatMul" else c for c in FIXED.computes)
    )
    r = compile_model(DIGITS / "digits_gemm_qop_s8s8_pt.onnx", "bitwise", tgt, synthesis=True)
    assert [s.verdict for s in r.sites] == ["refuted", "refuted"]
    assert all("synthesised" not in summary(s) for s in r.sites)


def test_per_column_tables_are_proven_but_stay_on_the_host():
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pt.onnx", "bitwise", FIXED, synthesis=True)
    assert [s.verdict for s in r.sites] == ["proven", "proven"]
    assert all({o["kind"] for o in _requant(s)} == {"synthesised"} for s in r.sites)
    assert not [st for st in r.lowered.steps if isinstance(st, NpuMatMul) and st.fused]
    assert any(d.code == "incomplete_parameters" and "one table" in d.message
               for d in r.diagnostics)  # fmt: skip


def test_synthesis_is_opt_in():
    r = compile_model(DIGITS / "digits_gemm_qop_s8s8_pt.onnx", "bitwise", FIXED)
    assert [s.verdict for s in r.sites] == ["refuted", "refuted"]
    assert all(summary(s) == "" for s in r.sites)


def test_per_channel_reports_impossible_groups_with_the_pair():
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pc.onnx", "bitwise", FIXED, synthesis=True)
    for s in r.sites:
        kinds = [o["kind"] for o in _requant(s)]
        assert "impossible" in kinds and "synthesised" in kinds
        assert s.verdict == "refuted"
        assert "no multiplier, shift and zero point separates acc=" in s.reason.message
        assert not s.applied


def test_cli_synthesize_flag(tmp_path):
    import subprocess
    import sys

    def run(*extra):
        return subprocess.run(
            [sys.executable, "-m", "compiler.cli.prover", "check",
             str(DIGITS / "digits_gemm_qop_s8s8_pt.onnx"), "--target", "npu_fixed",
             "--proofs-mode", "off", "--no-progress", *extra],
            capture_output=True, text=True, cwd=tmp_path, timeout=600,
        )  # fmt: skip

    assert run().returncode == 1
    r = run("--synthesize")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 proven" in r.stdout
