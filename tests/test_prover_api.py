"""Prover API: verdicts, counterexamples (replayed and lifted), policies, vacuity, index maps."""

from __future__ import annotations

import numpy as np
import pytest

from prover import counterexample as cx
from prover.api import VacuousObligation, check
from prover.errors import ReplayMismatch, SolverDisagreement
from prover.inttypes import INT8
from prover.lift import row_value
from prover.obligation import Obligation
from prover.policy import Policy
from prover.requant import quantize_multiplier, requant_float_concrete
from prover.samples import (
    index_map_flatten,
    lift_for,
    lut_of,
    requant,
    sigmoid_table,
    twos_complement,
)
from prover.terms import Var, op

ACC = Var("acc")
RNG = np.random.default_rng(7)
WEIGHTS = tuple(int(v) for v in RNG.integers(-128, 128, 64))
LIFT, RANGE = lift_for(WEIGHTS)
TABLE = sigmoid_table()
M, S = quantize_multiplier(1 / (8 * 96.0))


def epi(kind="requant_double", zp=2, table=TABLE, order="offset", m=M, s=S):
    return lut_of(requant(kind, ACC, multiplier=m, shift=s, zp=zp), table, order)


def ob(after, before=None, policy="bitwise", rng=RANGE, lift=LIFT):
    return Obligation("epilogue", before or epi(), after, {"acc": rng}, policy, lift)


EQUIVALENT = {
    "lut_twos_complement": lambda: ob(epi(table=twos_complement(TABLE), order="twos_complement")),
    "clip_absorbed": lambda: ob(
        lut_of(
            op(
                "clip", requant("requant_double", ACC, multiplier=M, shift=S, zp=2), lo=-128, hi=127
            ),
            TABLE,
        )
    ),
}
BUGGY = {
    "single_rounding": lambda: ob(epi(kind="requant_single")),
    "zero_point_off_by_one": lambda: ob(epi(zp=3)),
    "lut_index_order_without_reorder": lambda: ob(epi(order="twos_complement")),
}


@pytest.mark.parametrize("name", sorted(EQUIVALENT))
def test_equivalent_rewrites_are_proven(name):
    v = check(EQUIVALENT[name](), cross_check=True)
    assert v.status == "proven", v.reason
    assert v.max_diff == 0 and v.counterexample is None
    assert len(v.details["procedures"]) == 2  # really cross-checked by a second procedure
    assert v.details["cross_checked_by"] not in (None, v.solver)


@pytest.mark.parametrize("name", sorted(BUGGY))
def test_seeded_bugs_are_refuted_with_replayed_lifted_counterexample(name):
    o = BUGGY[name]()
    v = check(o, cross_check=True)
    assert v.status == "refuted"
    c = v.counterexample
    acc = c.assignment["acc"]
    assert RANGE[0] <= acc <= RANGE[1]
    # Independent replay, here in the test: both sides, concretely.
    b, a, ok_b, ok_a = cx.evaluate_point(o, {"acc": acc})
    assert ok_b and ok_a and b[0] == c.before and a[0] == c.after and b != a
    # The lifted row is a whole int8 input row producing that accumulator.
    row = c.lifted_input
    assert row is not None and len(row) == len(WEIGHTS)
    assert all(-128 <= x <= 127 for x in row)
    assert int(np.dot(np.array(row, dtype=np.int64), np.array(WEIGHTS, dtype=np.int64))) == acc
    assert row_value(LIFT, row) == acc
    # Minimal: no violating accumulator of smaller rank exists (checked by enumeration).
    xs = np.arange(RANGE[0], RANGE[1] + 1)
    from prover.enumerate import evaluate_block

    assumed, defined, diff = evaluate_block(o, {"acc": xs}, xs.size)
    bad = xs[assumed & (~defined | (diff > 0))]
    assert cx.rank(acc) == int(cx.rank_array(bad).min())


def test_refuted_verdict_is_deterministic_and_serialisable():
    import json

    o = BUGGY["single_rounding"]()
    v1, v2 = check(o), check(BUGGY["single_rounding"]())
    d1, d2 = v1.to_dict(), v2.to_dict()
    for d in (d1, d2):
        d.pop("time_ms")
        d.pop("details")
    assert d1 == d2
    json.dumps(v1.to_dict())


def _float_vs_fixed(policy: str, scale: float, rng=(-20000, 20000)):
    before = requant("requant_float", ACC, scale=scale, zp=-5)
    m, s = quantize_multiplier(float(np.float32(scale)))
    after = requant("requant_double", ACC, multiplier=m, shift=s, zp=-5)
    return Obligation("lowering", before, after, {"acc": rng}, policy)


def _refuting_scale() -> float:
    rng = np.random.default_rng(3)
    for _ in range(200):
        scale = float(np.float32(rng.uniform(1e-3, 2e-2)))
        if check(_float_vs_fixed("bitwise", scale), solver="segments").refuted:
            return scale
    raise AssertionError("no scale refutes bitwise: float vs fixed-point never differed")


def test_bounded_policy_proves_what_bitwise_refutes():
    scale = _refuting_scale()
    bw = check(_float_vs_fixed("bitwise", scale), cross_check=True)
    assert bw.refuted and bw.counterexample.diff == 1
    acc = bw.counterexample.assignment["acc"]
    onnx = int(requant_float_concrete(np.array([acc]), np.float32(scale), -5, INT8)[0])
    assert bw.counterexample.before == onnx  # the before side really is ONNX Runtime's formula
    b1 = check(_float_vs_fixed("bounded:1", scale), cross_check=True)
    assert b1.status == "proven" and b1.policy == Policy(1)
    assert b1.max_diff == 1  # the largest difference actually reached
    # Exhaustive enumeration computes the same largest difference independently.
    assert check(_float_vs_fixed("bounded:1", scale), solver="enumerate").max_diff == 1


def test_bounded_refutation_reports_difference_beyond_bound():
    o = ob(epi(zp=3), policy="bounded:1")
    v = check(o)
    assert v.refuted and v.counterexample.diff > 1 and v.max_diff >= v.counterexample.diff


def test_vacuous_range_is_an_error():
    with pytest.raises(VacuousObligation):
        check(ob(epi(), rng=(10, 5)))


def test_vacuous_preconditions_are_an_error():
    # requant_double with a left shift needs acc * 2^shift to fit int32: no acc in range does.
    bad = requant("requant_double", ACC, multiplier=1 << 30, shift=4, zp=0)
    o = Obligation("lowering", bad, bad, {"acc": (1 << 28, (1 << 28) + 100)})
    for solver in ("auto", "enumerate", "bitwuzla"):
        with pytest.raises(VacuousObligation):
            check(o, solver=solver)


def test_partly_undefined_domain_is_restricted_to_preconditions():
    # Only acc < 2^27 keeps acc*16 inside int32; differences beyond that are not reachable.
    a = requant("requant_double", ACC, multiplier=1 << 30, shift=4, zp=0)
    b = op("saturate", op("mul_const", ACC, c=8), type="int8")
    o = Obligation("lowering", a, b, {"acc": (-20, 20)})
    v = check(o, cross_check=True)
    assert v.status == "proven"


def test_index_map_identity_proven_and_transpose_refuted():
    v = check(index_map_flatten(5, 7), cross_check=True)
    assert v.status == "proven", v.reason
    t = check(index_map_flatten(6, 6, transposed=True), cross_check=True)
    assert t.refuted
    # The first index that moves: (0, 1) reads element (1, 0).
    assert t.counterexample.assignment == {"i": 0, "j": 1}
    assert t.counterexample.before == (0, 1) and t.counterexample.after == (1, 0)


def test_index_map_by_smt_on_a_large_domain():
    v = check(index_map_flatten(4096, 4096), solver="bitwuzla")
    assert v.status == "proven"
    t = check(index_map_flatten(4096, 4096, transposed=True), solver="bitwuzla")
    assert t.refuted and t.counterexample.assignment == {"i": 0, "j": 1}


def test_replay_rejects_a_witness_that_does_not_reproduce():
    o = EQUIVALENT["lut_twos_complement"]()
    with pytest.raises(ReplayMismatch):
        cx.replay(o, {"acc": 0})


def test_solver_disagreement_is_loud(monkeypatch):
    from prover import api
    from prover.decision import HOLDS, Decision

    o = BUGGY["zero_point_off_by_one"]()
    monkeypatch.setitem(api.PROCEDURES, "segments", lambda ob, b, dl: Decision(HOLDS, "segments"))
    with pytest.raises(SolverDisagreement):
        check(o, cross_check=True)


def test_bad_solver_name_and_policy_text_are_clear_errors():
    with pytest.raises(ValueError, match="unknown solver"):
        check(EQUIVALENT["clip_absorbed"](), solver="yices")
    for bad in ("bounded", "bounded:-1", "bounded:x", "exact", ""):
        with pytest.raises(ValueError, match="bad policy"):
            Policy.parse(bad)
    assert str(Policy.parse("bounded:3")) == "bounded:3" and Policy.parse("bitwise").bound == 0


@pytest.mark.parametrize("backend", ["z3", "cvc5"])
def test_resource_budget_exhausted_is_unknown_never_a_pass(backend):
    o = BUGGY["single_rounding"]()
    v = check(o, solver=backend, rlimit=1000)  # deterministic resource limit, not wall time
    assert v.status == "unknown" and not v.proven and v.counterexample is None
    assert backend in v.reason and v.details["budget"]["rlimit"] == 1000
