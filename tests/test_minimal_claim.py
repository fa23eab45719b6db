"""A refutation claims `details["minimal"]` exactly when its witness is the obligation's
simplest violating assignment (`counterexample.rank_key` order).

When that witness is unreachable from any input row, `check` (and `lift_refutation`)
report another, reachable witness found on a sub-range: it is not the simplest
violation, so the claim must be false there.
"""

from __future__ import annotations

import pytest

from prover.api import check, lift_refutation
from prover.counterexample import evaluate_point, rank
from prover.obligation import LiftSpec, Obligation
from prover.proofstore import ProofStore
from prover.terms import Var, op

ACC = Var("acc")
# differs from acc at every odd acc and at every acc above 5
AFTER = op("clip", op("mul_const", op("floordiv_const", ACC, c=2), c=2), lo=0, hi=5)
EVEN_ONLY = LiftSpec("acc", (2, 4), x_type="int8")  # rows reach even accumulators only
ANY = LiftSpec("acc", (3, 4), x_type="int8")  # rows reach every accumulator in range


def _ob(lift: LiftSpec | None) -> Obligation:
    return Obligation("epilogue", ACC, AFTER, {"acc": (0, 10)}, "bitwise", lift)


def _simplest_violation(ob: Obligation) -> int:
    lo, hi = ob.ranges["acc"]
    bad = [a for a in range(lo, hi + 1) if evaluate_point(ob, {"acc": a})[:2] != ((a,), (a,))]
    return min(bad, key=rank)


@pytest.mark.parametrize("solver", ["auto", "enumerate", "segments", "z3"])
def test_replaced_unreachable_witness_is_not_claimed_minimal(solver):
    ob = _ob(EVEN_ONLY)
    assert _simplest_violation(ob) == 1  # odd: no row reaches it
    v = check(ob, solver=solver)
    assert v.status == "refuted"
    assert v.counterexample.assignment["acc"] == 6  # the first reachable violation found
    assert v.counterexample.lifted_input is not None
    assert v.details["minimal"] is False


def test_lifting_later_also_drops_the_claim():
    ob = _ob(EVEN_ONLY)
    lazy = check(ob, lift=False)
    # before lifting the witness is the procedure's own, the simplest one: claimed
    assert lazy.counterexample.assignment["acc"] == 1 and lazy.details["minimal"] is True
    done = lift_refutation(ob, lazy)
    assert done.counterexample.assignment["acc"] == 6
    assert done.details["minimal"] is False
    assert done.details["minimal"] == check(ob).details["minimal"]


@pytest.mark.parametrize("lift", [ANY, None], ids=["reachable", "no-lift"])
def test_the_simplest_witness_kept_is_claimed_minimal(lift):
    ob = _ob(lift)
    v = check(ob, solver="enumerate")
    assert v.counterexample.assignment["acc"] == _simplest_violation(ob) == 1
    assert v.details["minimal"] is True


def test_stored_and_served_refutation_keeps_the_corrected_claim(tmp_path):
    ob = _ob(EVEN_ONLY)
    check(ob, store=ProofStore(tmp_path, "rw"))
    served = check(ob, store=ProofStore(tmp_path, "ro"))
    assert served.cached and served.counterexample.assignment["acc"] == 6
    assert served.details["minimal"] is False
