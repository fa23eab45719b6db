"""Lifting accumulator values to whole int8 input rows."""

from __future__ import annotations

import numpy as np
import pytest

from prover.errors import LiftError
from prover.lift import _greedy, lift_row, row_value, row_value_dot
from prover.obligation import LiftSpec


def test_greedy_lift_hits_every_sampled_value_of_the_range():
    rng = np.random.default_rng(11)
    w = tuple(int(v) for v in rng.integers(-128, 128, 512))
    spec = LiftSpec("acc", w, w_zp=3, x_zp=-2, x_type="int8", bias=1234)
    coeff = np.array(w) - 3
    lo = int(np.minimum(coeff * (-128 + 2), coeff * (127 + 2)).sum()) + 1234
    hi = int(np.maximum(coeff * (-128 + 2), coeff * (127 + 2)).sum()) + 1234
    for target in [lo, hi, 0, 1, -1, 1234, *rng.integers(lo, hi, 20).tolist()]:
        row = lift_row(spec, int(target))
        assert len(row) == 512 and all(-128 <= x <= 127 for x in row)
        x = np.array(row, dtype=np.int64)
        assert int(((x + 2) * coeff).sum()) + 1234 == target == row_value(spec, row)
        assert row_value_dot(spec, row) == target


def test_solver_fallback_when_greedy_cannot_finish():
    # Coefficients 6, 10, 15: greedy by magnitude gets stuck on divisibility; Z3 solves it.
    spec = LiftSpec("acc", (6, 10, 15), x_type="int8")
    for target in (1, 7, 31, -29):
        row = lift_row(spec, target)
        assert row_value(spec, row) == target


def test_unreachable_value_is_a_clear_error():
    spec = LiftSpec("acc", (2, 4), x_type="int8")
    with pytest.raises(LiftError, match="no int8 input row"):
        lift_row(spec, 3)  # odd: no row reaches it
    with pytest.raises(LiftError):
        lift_row(spec, 10_000)  # beyond the range


def test_refutation_at_an_unreachable_accumulator_is_unknown():
    """Violations only at accumulators no input row reaches: not a refutation, not a proof."""
    from prover.api import check
    from prover.obligation import Obligation
    from prover.terms import Var, op

    acc = Var("acc")
    rounded = op("mul_const", op("floordiv_const", acc, c=2), c=2)  # differs on odd values only
    spec = LiftSpec("acc", (2, 4), x_type="int8")  # reaches even values only
    v = check(Obligation("epilogue", acc, rounded, {"acc": (-10, 10)}, "bitwise", spec))
    assert v.status == "unknown" and v.counterexample is None
    assert "unreachable" in v.reason


def test_a_specs_weights_array_is_made_once_and_cannot_be_changed():
    """The lift reads a column's weights as one int64 array kept on its spec: equal to the
    weights, the same object every time, read-only (a spec is hashed by its weights), and
    not part of the spec's equality or JSON."""
    spec = LiftSpec("acc", (3, -4, 127, -128), w_zp=1, x_zp=-2)
    a = spec.weights_array
    assert a is spec.weights_array and a.dtype == np.int64
    assert a.tolist() == list(spec.weights)
    with pytest.raises(ValueError):
        a[0] = 9
    assert spec == LiftSpec("acc", (3, -4, 127, -128), w_zp=1, x_zp=-2)
    assert "weights_array" not in spec.to_json()
    assert lift_row(spec, row_value(spec, (5, 6, 7, 8))) is not None


def test_greedy_takes_the_largest_coefficient_first_and_the_earlier_of_equal_ones():
    """The lifted row is reported and kept in regression tests, so the greedy's order is
    part of its result: |c| descending, ties by position."""
    c = np.array([1, -3, 3, 2], dtype=np.int64)
    assert _greedy(c, 3, -128, 127) == [0, -1, 0, 0]  # -3 (position 1) before 3 (position 2)
    assert _greedy(c, 5, -128, 127) == [-1, -2, 0, 0]  # -3 twice, then 1 (3 and 2 skipped)
    assert _greedy(c[::-1].copy(), 3, -128, 127) == [0, 1, 0, 0]  # now 3 comes first
