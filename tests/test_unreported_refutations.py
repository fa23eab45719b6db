"""Refutations a site does not report stay unlifted (`compiler.proving.prove.lift_reported`):
nothing downstream may read one as if it had an input row, and the proof store and its
read-only gate must agree on which obligations have records.

A per-channel site on npu_fixed without synthesis has several refuted column groups; only
the first is lifted, stored and reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from cli_helpers import npuc, prover
from models import matmul_activation

from compiler.api import compile_model
from npu_backend.target import load_target
from prover.proofstore import ProofStore
from prover.verdict import Status

FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def _model():
    return matmul_activation(K=16, N=8, M=2, per_channel=True)


def test_only_the_reported_refutation_is_lifted_and_stored(tmp_path):
    r = compile_model(
        _model(), "bitwise", FIXED, synthesis=False, proofs_dir=tmp_path, proofs_mode="rw"
    )
    (s,) = r.sites
    verdicts = r.context.state.verdicts
    refuted = [h for h in s.obligations if verdicts[h].status == Status.REFUTED]
    assert s.verdict == Status.REFUTED and len(refuted) > 1
    reported = verdicts[s.obligation_hash]
    assert reported.counterexample.lifted_input is not None
    assert s.counterexample is not None and s.counterexample.inputs  # whole-model row
    assert s.counterexample.local == reported.counterexample
    others = [h for h in refuted if h != s.obligation_hash]
    assert all(verdicts[h].counterexample.lifted_input is None for h in others)
    store = ProofStore(tmp_path, "ro")
    assert store.path(s.obligation_hash).is_file()
    assert not any(store.path(h).is_file() for h in others)  # never stored unlifted


def test_the_json_report_carries_only_the_lifted_counterexample(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_model(), str(p))
    args = ["--target", "npu_fixed", "--no-synthesize", "--no-progress"]
    r = prover("check", p, *args, "--proofs-mode", "off", "--format", "json")
    assert r.returncode == 1, r.stderr
    (site,) = json.loads(r.stdout)["sites"]
    assert site["verdict"] == "refuted" and site["counterexample"]["inputs"]


def test_a_store_written_by_rw_passes_the_ro_gate(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_model(), str(p))
    args = ["--target", "npu_fixed", "--no-synthesize", "--proofs", tmp_path / "proofs"]
    rw = npuc("compile", p, "-o", tmp_path / "a.npuprog", *args, "--proofs-mode", "rw")
    assert rw.returncode == 0, rw.stderr
    ro = npuc("compile", p, "-o", tmp_path / "b.npuprog", *args, "--proofs-mode", "ro")
    assert ro.returncode == 0, ro.stderr
    assert "proof gate failed" not in ro.stderr


def _checked_in_rw(tmp_path) -> tuple[list, Path, str]:
    """The model checked once in rw (exit 1): (CLI args, store, reported obligation)."""
    p = tmp_path / "m.onnx"
    onnx.save(_model(), str(p))
    store = tmp_path / "proofs"
    args = [p, "--target", "npu_fixed", "--no-synthesize", "--no-progress", "--proofs", store]
    r = prover("check", *args, "--format", "json")
    assert r.returncode == 1, r.stderr
    (site,) = json.loads(r.stdout)["sites"]
    return args, store, site["obligation"]


def test_the_ro_gate_still_asks_for_the_reported_refutations_record(tmp_path):
    args, store, reported = _checked_in_rw(tmp_path)
    ProofStore(store, "ro").path(reported).unlink()  # the one the verdict rests on
    ro = prover("check", *args, "--proofs-mode", "ro")
    assert ro.returncode == 5 and "proof gate failed" in ro.stderr


def test_a_gate_miss_beside_a_refuted_site_names_exit_1(tmp_path):
    """Refuted (exit 1) takes precedence over a gate miss (5); stderr must not claim 5."""
    args, store, reported = _checked_in_rw(tmp_path)
    for f in store.glob("??/*.json"):  # every record but the reported refutation's
        if f.stem != reported:
            f.unlink()
    ro = prover("check", *args, "--proofs-mode", "ro")
    assert ro.returncode == 1, ro.stderr
    assert "proof gate failed (exit 1: a refuted site takes precedence)" in ro.stderr
