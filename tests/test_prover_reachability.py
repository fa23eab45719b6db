"""A refutation must be reachable from a real input row of the compute op.

ONNX Runtime's float requantization at scale 0.5 rounds ties to even; gemmlowp's
fixed-point form with the same scale (M = 2^30, shift 0) rounds them away from
zero. They differ exactly at odd accumulators. When every weight is even, no
input row produces an odd accumulator, so the interval [lo, hi] over-approximates
the reachable set and the prover must not call the rewrite refuted.
"""

from __future__ import annotations

import numpy as np

from prover.api import check
from prover.inttypes import INT8
from prover.lift import row_value
from prover.matmul import accumulator_range
from prover.obligation import LiftSpec, Obligation
from prover.terms import Var, op


def _obligation(weights: list[int]) -> Obligation:
    acc = Var("acc")
    w = np.array(weights, dtype=np.int64).reshape(-1, 1)
    r = accumulator_range(w, 0, INT8, 0)
    return Obligation(
        kind="epilogue",
        before=op("requant_float", acc, scale=0.5, zp=0, out="int8"),
        after=op("requant_double", acc, multiplier=1 << 30, shift=0, zp=0, out="int8"),
        ranges={"acc": (r.lo[0], r.hi[0])},
        policy="bitwise",
        lift=LiftSpec("acc", tuple(weights), 0, 0, "int8", 0),
    )


def test_unreachable_counterexamples_give_unknown_not_refuted():
    v = check(_obligation([2, -4, 6, 8]))
    assert v.status == "unknown"
    assert "unreachable" in v.reason


def test_reachable_counterexample_is_refuted_with_its_input_row():
    ob = _obligation([2, -4, 3, 8])
    v = check(ob)
    assert v.status == "refuted"
    row = v.counterexample.lifted_input
    assert row is not None
    assert row_value(ob.lift, row) == v.counterexample.assignment["acc"]
    assert v.counterexample.assignment["acc"] % 2 == 1
