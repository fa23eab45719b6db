"""The compiler synthesises fixed-point parameters where rounding the scale is refuted.

On `npu_fixed` (double rounding; the target declares multiplier, shift, zero point and
table choosable; synthesis is on by default) the digits MLP's per-tensor QGemm Sigmoid
sites, int8 and uint8, are refuted with rounded parameters, fused with synthesised ones
(each proven; uint8 sites get an int8 index), and the program equals ONNX Runtime on the
360 test digits; the per-channel sites keep groups for which no parameters exist, and the
report names the conflicting accumulator pair. The MatMul+QLinearAdd variant is proven
per group, but the exhaustive shared-table search proves that no one table serves its
groups (a minimal pair of column groups is named), and the postprocessor holds one table
per MatMul, so lowering keeps it on the host.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from qdq_models import ort_outputs

from compiler.api import compile_model
from compiler.ort.reference_host import host_profile
from compiler.proving.fixed_synthesis import summary
from compiler.report.json_form import site_json
from compiler.report.model import SiteReport
from npu_backend.codegen import generate
from npu_backend.lowered import NpuMatMul
from npu_backend.postprocess import posts_of
from npu_backend.runner import run_batched
from npu_backend.target import TargetError, load_target, parse_target
from prover.reference import Accumulation

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _requant(site) -> list[dict]:
    return next(d["requant"] for d in site.details if "requant" in d)


def _ort(path, x):
    """ORT at its default optimisation level on the digits input `x`."""
    return ort_outputs(path, {"input": x}, "all")


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
                         reference="ort-host")  # fmt: skip


def test_per_tensor_sites_fuse_with_synthesised_parameters(per_tensor):
    r = per_tensor
    assert [s.verdict for s in r.sites] == ["proven", "proven"]
    assert all(s.applied for s in r.sites)
    for s in r.sites:
        kinds = {o["kind"] for o in _requant(s)}
        assert kinds == {"synthesised"}, kinds
        assert "synthesised" in summary(s)
        (c,) = [c for c in site_json(SiteReport.of(s))["checks"]
                if c["check"] == "requant_synthesis"]  # fmt: skip
        assert c["status"] == "held"
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
    r = compile_model(DIGITS / "digits_gemm_qop_s8s8_pt.onnx", "bitwise", tgt)
    assert [s.verdict for s in r.sites] == ["refuted", "refuted"]
    assert all("synthesised" not in summary(s) for s in r.sites)


@pytest.mark.slow  # the default run keeps a fast sample of this group (README: test time)
def test_per_column_tables_are_proven_but_stay_on_the_host():
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pt.onnx", "bitwise", FIXED)
    assert [s.verdict for s in r.sites] == ["proven", "proven"]
    assert all({o["kind"] for o in _requant(s)} == {"synthesised"} for s in r.sites)
    for s in r.sites:  # the exhaustive shared-table search proves that none exists
        assert "no table is shared by the groups of columns" in summary(s), summary(s)
        assert "not a proof" not in summary(s)
        (c,) = [c for c in site_json(SiteReport.of(s))["checks"]
                if c["check"] == "requant_synthesis"]  # fmt: skip
        assert c["status"] == "violated"
    assert not [st for st in r.lowered.steps if isinstance(st, NpuMatMul) and st.fused]
    assert any(d.code == "incomplete_parameters" and "one table" in d.message
               for d in r.diagnostics)  # fmt: skip


def test_synthesis_can_be_turned_off():
    r = compile_model(DIGITS / "digits_gemm_qop_s8s8_pt.onnx", "bitwise", FIXED, synthesis=False)
    assert [s.verdict for s in r.sites] == ["refuted", "refuted"]
    assert all(summary(s) == "" for s in r.sites)


def test_a_target_without_a_space_is_unaffected_by_the_default():
    """npu_float declares no synthesis space: same verdicts, no requant details."""
    float_t = load_target("npu_backend/targets/npu_float.toml")
    m = DIGITS / "digits_gemm_qop_s8s8_pc.onnx"
    on, off = (compile_model(m, "bitwise", float_t, synthesis=s) for s in (True, False))
    assert [s.verdict for s in on.sites] == [s.verdict for s in off.sites]
    assert all(
        summary(s) == "" and s.details == t.details
        for s, t in zip(on.sites, off.sites, strict=True)
    )


@pytest.fixture(scope="module")
def u8s8_pt():
    """Under the default (exact) reference: the verdict does not depend on this host's CPU."""
    return compile_model(DIGITS / "digits_gemm_qop_u8s8_pt.onnx", "bitwise", FIXED)


@pytest.fixture(scope="module")
def u8s8_host():
    """Under this host's ORT (probed): fused only where its u8s8 GEMM is exact."""
    return compile_model(DIGITS / "digits_gemm_qop_u8s8_pt.onnx", "bitwise", FIXED,
                         reference="ort-host")  # fmt: skip


def test_u8s8_sites_fuse_with_an_int8_index(u8s8_pt):
    """uint8 intermediates: npu_fixed has int8 only, but zero point and table are the
    compiler's, so synthesis picks an int8 index (off: rejected by type)."""
    r = u8s8_pt
    assert [s.verdict for s in r.sites] == ["proven", "proven"] and all(s.applied for s in r.sites)
    fused = [st for st in r.lowered.steps if isinstance(st, NpuMatMul) and st.fused]
    assert len(fused) == 2
    for st in fused:
        for p in posts_of(st.post):
            assert p.requant.out_type == "int8" and p.lut.in_type == "int8"
            assert p.out_type == "uint8"
    off = compile_model(DIGITS / "digits_gemm_qop_u8s8_pt.onnx", "bitwise", FIXED, synthesis=False)
    assert [s.reason.code for s in off.sites] == ["unsupported_intermediate_type"] * 2


def test_u8s8_program_equals_onnx_runtime_on_the_test_digits(u8s8_host):
    """Fused where this host's ORT is exact; where it saturates int16 pairs (AVX2 without
    VNNI) the sites are not proven and stay on the host. Either way the program equals
    this host's ORT on the 360 test digits."""
    x = np.load(DIGITS / "digits_test.npz")["input"]
    saturating = host_profile().u8s8_accumulation == Accumulation.PAIR_SATURATING_INT16
    proven = [s.verdict == "proven" for s in u8s8_host.sites]
    assert proven == [not saturating] * 2
    got = run_batched(generate(u8s8_host.lowered, FIXED), {"input": x})[0]
    want = _ort(DIGITS / "digits_gemm_qop_u8s8_pt.onnx", x)
    for k, v in want.items():
        assert np.array_equal(np.asarray(got[k]), v), k


def test_uint8_intermediate_without_a_choosable_index_is_rejected():
    """A space without zero point/table choice cannot change the index type."""
    caps = dataclasses.replace(
        FIXED.compute("MatMul"), synthesis=frozenset({"multiplier", "shift", "table"})
    )
    tgt = dataclasses.replace(
        FIXED, computes=tuple(caps if c.op == "MatMul" else c for c in FIXED.computes)
    )
    r = compile_model(DIGITS / "digits_gemm_qop_u8s8_pt.onnx", "bitwise", tgt)
    assert [s.reason.code for s in r.sites] == ["unsupported_intermediate_type"] * 2


def test_per_channel_reports_impossible_groups_with_the_pair():
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pc.onnx", "bitwise", FIXED)
    for s in r.sites:
        kinds = [o["kind"] for o in _requant(s)]
        assert "impossible" in kinds and "synthesised" in kinds
        assert s.verdict == "refuted"
        assert "no multiplier, shift and zero point separates acc=" in s.reason.message
        assert not s.applied
        # not fused: the descriptor (what a replay runs) stays the rounded one, one table
        assert len({g.post.lut.table for g in s.post}) == 1
        # the JSON report lists every group's outcome, each impossible one with its pair
        (c,) = [c for c in site_json(SiteReport.of(s))["checks"]
                if c["check"] == "requant_synthesis"]  # fmt: skip
        assert c["status"] == "violated" and len(c["groups"]) == len(kinds)
        imp = [g for g in c["groups"] if g["kind"] == "impossible"]
        assert len(imp) == kinds.count("impossible")
        assert all(re.search(r"acc=-?\d+ and acc=-?\d+", g["message"]) for g in imp)


def test_cli_synthesize_flag(tmp_path):
    from cli_helpers import prover  # each command in its own process (fork_runner)

    def run(*extra):
        return prover("check", str(DIGITS / "digits_gemm_qop_s8s8_pt.onnx"),
                      "--target", "npu_fixed", "--proofs-mode", "off", "--no-progress",
                      *extra, cwd=tmp_path)  # fmt: skip

    assert run("--no-synthesize").returncode == 1
    for r in (run(), run("--synthesize")):  # on by default
        assert r.returncode == 0, r.stdout + r.stderr
        assert "2 proven" in r.stdout


def test_synthesis_avoids_the_left_shift_overflow_of_the_rounded_parameters():
    """K=1024, scale 1/4096: the rounded shift overflows int32 on the NPU (refuted without
    synthesis, test_npu_preconditions); synthesis only proposes shifts whose left shift
    fits the whole accumulator range, the proposal is proven, and the program equals ORT
    at the extremes."""
    from models import matmul_activation

    from compiler.ort.tables import session
    from npu_backend import simulator

    w = np.random.default_rng(0).integers(-127, 128, size=(1024, 2)).astype(np.int8)
    w[:, 0] = 127
    m = matmul_activation(K=1024, N=2, M=1, w=w, a_scale=1.0, w_scale=1.0, y_scale=1 / 4096)
    r = compile_model(m, "bitwise", FIXED)
    (site,) = r.sites
    assert site.verdict == "proven" and site.applied
    assert {o["kind"] for o in _requant(site)} == {"synthesised"}
    (st,) = [s for s in r.lowered.steps if isinstance(s, NpuMatMul) and s.fused]
    prog = generate(r.lowered, FIXED)
    names = [o.name for o in m.graph.output]
    rng = np.random.default_rng(1)
    feeds = [{"x": np.full((1, 1024), v, dtype=np.int8)} for v in (127, -128, 0, 1, -1)]
    feeds += [{"x": rng.integers(-128, 128, (1, 1024)).astype(np.int8)} for _ in range(3)]
    for f in feeds:
        out, _ = simulator.run(prog, f)
        want = dict(zip(names, session(m).run(None, f), strict=True))
        np.testing.assert_array_equal(out["y"], want["y"])
