"""A `bounded:N` bound larger than any output difference allows every pair, with every
solver: the SMT encoding caps it at the largest possible difference and never wraps it
(2^63 once read as -2^63 in the 64-bit bit-vectors: a false refutation, then exit 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prover import enumerate as penum
from prover import smtdecide
from prover.bounds import diff_bound
from prover.obligation import Obligation
from prover.smtlib import Encoding, to_smtlib
from prover.solver_names import SOLVERS
from prover.solvers import Budget
from prover.terms import Var, op
from tests.cli_helpers import EXAMPLES, prover

X = Var("x")
HUGE = [2**63, 2**64 + 1, 10**30]  # wrap to -2^63, to 1, to something else in 64 bits


def _shifted(policy: str) -> Obligation:
    """saturate(x) vs saturate(x + 3) over x in [-200, 200]: largest difference 3."""
    before = op("saturate", X, type="int8")
    after = op("saturate", op("add_const", X, c=3), type="int8")
    return Obligation("epilogue", before, after, {"x": (-200, 200)}, policy)


def test_diff_bound_caps_the_encoded_bound():
    ob = _shifted(f"bounded:{2**63}")
    assert diff_bound(ob) == 255  # int8 against int8
    enc = Encoding(ob)
    assert enc.bound == 255 and enc.bound < 2 ** (enc.width - 1)
    assert Encoding(_shifted("bounded:2")).bound == 2
    # the exported query of a huge bound is the query of the cap, word for word
    body = [to_smtlib(_shifted(p)).split("\n", 1)[1] for p in (f"bounded:{2**63}", "bounded:255")]
    assert body[0] == body[1]


@pytest.mark.parametrize("bound", HUGE)
@pytest.mark.parametrize("backend", ["bitwuzla", "z3", "cvc5"])
def test_huge_bound_holds_with_every_smt_backend(backend, bound):
    ob = _shifted(f"bounded:{bound}")
    ref = penum.decide(ob)
    assert (ref.status, ref.max_diff) == ("holds", 3)
    d = smtdecide.decide(ob, backend, Budget(timeout_s=60))
    assert (d.status, d.max_diff) == ("holds", 3)


@pytest.mark.parametrize("backend", ["bitwuzla", "z3", "cvc5"])
def test_bound_below_the_difference_still_refutes(backend):
    d = smtdecide.decide(_shifted("bounded:2"), backend, Budget(timeout_s=60))
    assert d.status == "violated" and d.witness is not None


SLOW_CLI = {"z3", "cvc5", "bitwuzla"}  # seconds of SMT each on a sigmoid table


@pytest.mark.parametrize(
    "solver", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_CLI else s for s in SOLVERS]
)
def test_cli_huge_bound_proves_with_every_solver_name(tmp_path: Path, solver):
    r = prover(
        "check", EXAMPLES / "matmul_sigmoid.onnx", "--proofs-mode", "off",
        "--policy", f"bounded:{2**63}", "--solver", solver,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "PROVEN" in r.stdout and r.stderr == ""
