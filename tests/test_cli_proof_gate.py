"""The proof store as users meet it: no surprise writes, the ro gate (exit 5), forged records.

Every run here uses a temporary store (a copy of the committed one at most), so the
suite never writes into the repository's proofs/.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import EXAMPLES, REPO, assert_one_line_error, npuc, prover

from compiler.regress.regen_proofs import configs
from prover.api import SOLVERS
from prover.terms import canonical

SHOWCASE = EXAMPLES / "showcase.onnx"
# Exit code of the ro gate per shipped example under the defaults (README table).
EXPECTED_EXIT = {
    "showcase.onnx": 1,  # one site refuted, replayed from its committed record
}


def store_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "proofs"
    shutil.copytree(REPO / "proofs", dest)
    return dest


def test_the_committed_store_covers_every_example_on_both_shipped_targets():
    models = sorted(EXAMPLES.glob("*.onnx"))
    assert len(models) >= 9
    covered = {(m, t) for m, policy, t in configs() if policy == "bitwise"}
    assert covered >= {(m, t) for m in models for t in (None, "npu_fixed")}
    assert {p.stem for p in (REPO / "npu_backend" / "targets").glob("*.toml")} == {
        "npu_float",
        "npu_fixed",
    }  # None is npu_float, the default


def test_every_example_configuration_passes_the_ro_gate_on_the_committed_store(tmp_path):
    proofs = store_copy(tmp_path)
    for model, policy, target in configs():
        extra = ["--policy", policy] + (["--target", target] if target else [])
        r = prover("check", model, *extra, "--proofs", proofs, "--proofs-mode", "ro")
        want = EXPECTED_EXIT.get(model.name, 0) if (policy, target) == ("bitwise", None) else 0
        assert r.returncode == want, (model.name, extra, r.returncode, r.stderr)
        assert "proof gate failed" not in r.stderr, r.stderr
        lines = r.stderr.splitlines()
        assert all(line.startswith("prover: proof record ") for line in lines), r.stderr
        assert all(line.endswith("replayed") or ": re-decided by " in line for line in lines), (
            r.stderr
        )


@pytest.mark.parametrize("target", [None, "npu_fixed"])
def test_npuc_compile_passes_the_ro_gate_on_every_example(tmp_path, target):
    proofs = store_copy(tmp_path)
    extra = ["--target", target] if target else []
    for model in sorted(EXAMPLES.glob("*.onnx")):
        prog = tmp_path / f"{model.stem}.npuprog"
        r = npuc("compile", model, "-o", prog, *extra, "--proofs", proofs, "--proofs-mode", "ro")
        assert r.returncode == 0, (model.name, target, r.stderr)
        assert "proof gate failed" not in r.stderr and prog.is_file(), r.stderr


def test_default_check_and_compile_write_nothing_in_the_working_directory(tmp_path):
    r = prover("check", EXAMPLES / "matmul_sigmoid.onnx", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == []
    c = npuc("compile", EXAMPLES / "matmul_sigmoid.onnx", "-o", "p.npuprog", cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["p.npuprog"]


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_a_store_mode_without_a_store_is_bad_usage(tmp_path, mode):
    r = prover("check", SHOWCASE, "--proofs-mode", mode, cwd=tmp_path)
    assert_one_line_error(r, f"--proofs-mode {mode} needs a store", "--proofs DIR")
    assert list(tmp_path.iterdir()) == []


def test_help_documents_exit_5_and_lists_the_accepted_solvers():
    for h in (prover("check", "--help"), npuc("compile", "--help")):
        assert h.returncode == 0
        assert "  5  proof gate failed" in h.stdout
        assert "NPUFUSION_PROOF_KEY" in h.stdout and "--recheck-budget" in h.stdout
        assert ", ".join(SOLVERS) in " ".join(h.stdout.split())


# z3 and cvc5 take 1.5-1.8 s each through the CLI; the other names keep the CLI path in the
# default run, and the solvers themselves are tested in process (test_prover_solvers)
SLOW_CLI_SOLVERS = ("z3", "cvc5")


@pytest.mark.parametrize(
    "solver",
    [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_CLI_SOLVERS else s for s in SOLVERS],
)
def test_every_listed_solver_is_accepted(solver):
    r = prover("check", EXAMPLES / "matmul_sigmoid.onnx", "--solver", solver)
    assert r.returncode == 0, r.stderr


# --- forged records never reach codegen ------------------------------------------------


def _refuted_record(store: Path) -> Path:
    for p in sorted(store.glob("??/*.json")):
        rec = json.loads(p.read_text())
        if rec["verdict"]["status"] == "refuted" and rec["obligation"]["kind"] == "epilogue":
            return p
    raise AssertionError(f"no refuted epilogue record in {store}")


def _forge_proven(path: Path) -> None:
    """Refuted edited into proven, digest recomputed (what anyone can do without a key)."""
    rec = json.loads(path.read_text())
    for r in (rec, rec["verdict"]):
        r["counterexample"] = None
    rec["verdict"]["status"] = "proven"
    rec["verdict"]["reason"] = ""
    body = {k: v for k, v in rec.items() if k != "digest"}
    rec["digest"] = hashlib.sha256(canonical(body).encode()).hexdigest()
    path.write_text(json.dumps(rec))


@pytest.fixture()
def forged(tmp_path):
    """A store for the showcase (signed with a key file) whose refuted record is forged."""
    key = tmp_path / "key"
    key.write_text("a team secret\n")
    proofs = tmp_path / "proofs"
    r = prover("check", SHOWCASE, "--proofs", proofs, "--proof-key-file", key)
    assert r.returncode == 1, r.stderr
    rec = _refuted_record(proofs)
    assert "signature" in json.loads(rec.read_text())
    _forge_proven(rec)
    return tmp_path, proofs, key, rec


def test_forged_record_is_re_decided_and_rejected_by_the_npuc_gate(forged):
    d, proofs, key, rec = forged
    prog = d / "show.npuprog"
    r = npuc("compile", SHOWCASE, "-o", prog, "--proofs", proofs, "--proofs-mode", "ro")
    assert_one_line_error(r, str(rec), "says proven", "violated")
    assert not prog.exists()


def test_forged_record_beyond_the_budget_fails_its_signature(forged):
    d, proofs, key, rec = forged
    prog = d / "show.npuprog"
    r = npuc(
        "compile", SHOWCASE, "-o", prog, "--proofs", proofs, "--proofs-mode", "ro",
        "--proof-key-file", key, "--recheck-budget", "0",
    )  # fmt: skip
    assert r.returncode == 5, r.stderr
    assert f"{rec}: re-decided" not in r.stderr
    assert str(rec) in r.stderr and "does not verify with the configured key" in r.stderr
    assert "proof gate failed" in r.stderr and not prog.exists()


def test_beyond_the_budget_signed_records_are_served_and_say_so(tmp_path):
    key = tmp_path / "key"
    key.write_text("a team secret\n")
    proofs = tmp_path / "proofs"
    model = EXAMPLES / "matmul_sigmoid.onnx"
    # a named procedure: each obligation its own record (an identity family's is re-decided
    # at no cost, so it is served unsigned)
    named = ("--solver", "segments")
    assert (
        prover("check", model, *named, "--proofs", proofs, "--proof-key-file", key).returncode == 0
    )
    gate = ("--proofs", proofs, "--proofs-mode", "ro", "--recheck-budget", "0", *named)
    signed = prover("check", model, *gate, "--proof-key-file", key)
    assert signed.returncode == 0, signed.stderr
    assert signed.stderr.count(": signature verified") == len(list(proofs.glob("??/*.json")))
    unsigned = prover("check", model, *gate)  # no key configured: cannot be trusted
    assert unsigned.returncode == 5
    assert "no proof key is configured" in unsigned.stderr
