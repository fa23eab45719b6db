"""The read-only gate passes after an rw run when fixed-point synthesis is on (issue 28 #4).

With synthesis, the rounded parameters of a group are refuted but that refutation is never
reported, so never lifted and never stored; the synthesised parameters are proven and
stored. A later `ro` run of the same check must not ask for the rounded record: it
synthesises again and is served the synthesised proof. `prover check` and `npuc compile`.
"""

from __future__ import annotations

import re

import pytest
from cli_helpers import EXAMPLES, npuc, prover

from compiler.api import compile_model
from compiler.cli.check_run import missing_proofs
from npu_backend.target import load_target
from prover.proofstore import ProofStore
from prover.verdict import Status

MODEL = EXAMPLES / "matmul_sigmoid.onnx"
FIXED = ("--target", "npu_fixed", "--no-progress")
NPU_FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def test_prover_check_rw_then_ro_passes_the_gate_on_npu_fixed(tmp_path):
    store = tmp_path / "proofs"
    rw = prover("check", MODEL, *FIXED, "--proofs", store)
    assert rw.returncode == 0, rw.stderr
    ro = prover("check", MODEL, *FIXED, "--proofs", store, "--proofs-mode", "ro")
    assert ro.returncode == 0, ro.stderr
    assert "proof gate failed" not in ro.stderr
    assert "PROVEN   matmul+sigmoid" in ro.stdout and "1 synthesised" in ro.stdout
    assert ro.stderr.count("prover: proof record ") == len(list(store.glob("??/*.json")))


def test_npuc_compile_rw_then_ro_writes_the_program_on_npu_fixed(tmp_path):
    store = tmp_path / "proofs"
    rw = npuc("compile", MODEL, "-o", tmp_path / "a.npuprog", *FIXED, "--proofs", store)
    assert rw.returncode == 0, rw.stderr
    prog = tmp_path / "b.npuprog"
    ro = npuc("compile", MODEL, "-o", prog, *FIXED, "--proofs", store, "--proofs-mode", "ro")
    assert ro.returncode == 0, ro.stderr
    assert prog.is_file() and "1 of 1 candidate fusion applied" in ro.stdout
    assert prog.read_bytes() == (tmp_path / "a.npuprog").read_bytes()


def test_the_rounded_refutation_is_not_stored_and_not_asked_for(tmp_path):
    rw = compile_model(MODEL, "bitwise", NPU_FIXED, proofs_dir=tmp_path, proofs_mode="rw")
    (site,) = rw.sites
    assert site.verdict == Status.PROVEN and len(site.unrelied) == 1
    (rounded,) = site.unrelied
    assert rw.context.state.verdicts[rounded].status == Status.REFUTED
    assert not ProofStore(tmp_path).path(rounded).exists()  # never lifted, never stored
    ro = compile_model(MODEL, "bitwise", NPU_FIXED, proofs_dir=tmp_path, proofs_mode="ro")
    (again,) = ro.sites
    assert again.verdict == Status.PROVEN and again.unrelied == [rounded]
    assert missing_proofs(ro, ProofStore(tmp_path, "ro")) == []


def test_a_missing_synthesised_record_still_fails_the_gate(tmp_path):
    store = tmp_path / "proofs"
    assert prover("check", MODEL, *FIXED, "--proofs", store).returncode == 0
    for f in store.glob("??/*.json"):  # the synthesised proof the fusion rests on
        f.unlink()
    ro = prover("check", MODEL, *FIXED, "--proofs", store, "--proofs-mode", "ro")
    assert ro.returncode == 5, ro.stderr
    assert "proof gate failed" in ro.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["digits_gemm_qdq_s8s8_pc", "digits_matmul_qop_s8s8_pc"])
def test_digits_per_channel_models_pass_the_gate_after_rw(tmp_path, name):
    """Per-channel digits layers on npu_fixed: groups synthesised, groups impossible, sites
    rejected for their intermediate type or refuted; the ro run agrees with the rw run."""
    model = EXAMPLES / "digits" / f"{name}.onnx"
    store = tmp_path / "proofs"
    rw = prover("check", model, *FIXED, "--proofs", store)
    assert rw.returncode in (0, 1), rw.stderr
    ro = prover("check", model, *FIXED, "--proofs", store, "--proofs-mode", "ro")
    assert ro.returncode == rw.returncode, ro.stderr
    assert "proof gate failed" not in ro.stderr
    untimed = re.compile(r"\d+ ms")
    assert untimed.sub("", ro.stdout) == untimed.sub("", rw.stdout)
