"""A warm run of an unchanged model (issue 15 item 2): with a signed store and
`--recheck-budget 0` it decides nothing, lifts nothing and starts no ORT session; counted
with `compiler.proving.prove.COUNTS`, never timed. Also: when worker processes pay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from compiler.cli.check_run import CheckOptions, run_pipeline
from compiler.proving import prove

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from check_bench import chain_model  # noqa: E402

SITES = 6


@pytest.fixture
def chain(tmp_path) -> Path:
    p = tmp_path / "chain.onnx"
    onnx.save(chain_model(SITES), p)
    return p


def _run(model: Path, **kw) -> tuple[object, dict[str, int]]:
    before = dict(prove.COUNTS)
    run = run_pipeline(str(model), CheckOptions(progress=False, **kw))
    keys = ("decided", "served", "redecided", "lifted", "errors")
    return run, {k: prove.COUNTS[k] - before.get(k, 0) for k in keys}


def _verdicts(run) -> list[tuple]:
    return [
        (s.verdict, s.obligation_hash, s.max_diff, s.reason, repr(s.counterexample))
        for s in run.report.sites
    ]


# A named procedure: each site's obligation is decided and recorded on its own (with the
# default `auto`, the chain's identities are one family each, re-decided at no cost).
SEG = "segments"


def test_a_warm_signed_run_decides_nothing_and_reports_the_same(chain, tmp_path):
    store, key = tmp_path / "store", tmp_path / "key"
    key.write_text("test key\n")
    cold, n = _run(chain, proofs=str(store), proof_key_file=str(key), solver=SEG)
    assert n["decided"] == SITES and n["served"] == 0
    warm, n = _run(
        chain, proofs=str(store), proof_key_file=str(key), recheck_budget_s=0, solver=SEG
    )
    assert n == {"decided": 0, "served": SITES, "redecided": 0, "lifted": 0, "errors": 0}
    assert {r["served"] for r in warm.report.proof_records} == {"signature verified"}
    assert _verdicts(warm) == _verdicts(cold)


def test_an_unsigned_warm_run_re_decides_every_record(chain, tmp_path):
    store = tmp_path / "store"
    _run(chain, proofs=str(store), solver=SEG)
    _, n = _run(chain, proofs=str(store), solver=SEG)  # default budget: never on its word
    assert n["decided"] == 0 and n["served"] == SITES and n["redecided"] == SITES


def test_a_warm_run_re_decides_identity_families_without_a_key(chain, tmp_path):
    """With `auto`, the chain's sites and lowerings are identities (`prover.family`): their
    records are served re-decided by identity, no key needed, with the cold run's verdicts;
    nothing goes to a procedure."""
    store = tmp_path / "store"
    cold, n = _run(chain, proofs=str(store))
    assert n["decided"] == 0
    warm, n = _run(chain, proofs=str(store), recheck_budget_s=0)
    assert n["decided"] == 0 and n["served"] >= SITES and n["lifted"] == 0
    assert {r["served"] for r in warm.report.proof_records} == {"re-decided by identity"}
    assert _verdicts(warm) == _verdicts(cold)


def test_a_warm_run_of_a_refuted_model_lifts_nothing(tmp_path):
    model, store = ROOT / "examples" / "showcase.onnx", tmp_path / "store"
    cold, n = _run(model, proofs=str(store))
    assert n["lifted"] >= 1  # the reported counterexample is lifted (and stored) once
    warm, n = _run(model, proofs=str(store))
    assert n["decided"] == 0 and n["lifted"] == 0 and n["served"] > 0
    assert "replayed" in {r["served"] for r in warm.report.proof_records}
    assert _verdicts(warm) == _verdicts(cold)


def _loaded_after(model: Path, *args: str) -> set[str]:
    heavy = ("onnxruntime", "z3", "cvc5", "bitwuzla")
    code = (
        "import sys\nfrom compiler.cli.prover import main\n"
        f"rc = main(['check', {str(model)!r}, '--no-progress', *{args!r}])\n"
        f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    rc, loaded = p.stdout.strip().splitlines()[-1].split(" ", 1)
    assert rc == "0", p.stderr[-400:]
    return set(eval(loaded))  # a list literal printed by the probe


def test_a_warm_signed_run_starts_no_ort_session_and_no_solver(chain, tmp_path):
    store, key = tmp_path / "store", tmp_path / "key"
    key.write_text("test key\n")
    _run(chain, proofs=str(store), proof_key_file=str(key))
    args = ("--proofs", str(store), "--proof-key-file", str(key), "--recheck-budget", "0")
    assert _loaded_after(chain, *args) == set()  # ORT not even imported: no session


@pytest.mark.parametrize(
    ("per_s", "rest", "jobs", "pay"),
    [
        (0.001, 2048, 1, False),  # one job: never
        (0.0002, 2048, 2, False),  # 0.41 s of work left, half of it < starting a worker
        (0.001, 2048, 2, True),  # 1 s of work saved > starting a worker
        (0.5, 1, 2, False),  # one obligation cannot be split
        (0.5, 4, 2, True),
    ],
)
def test_workers_pay_only_when_the_work_saved_exceeds_their_start(per_s, rest, jobs, pay):
    assert prove.workers_pay(per_s, rest, jobs) is pay
