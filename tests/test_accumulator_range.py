"""`prover.matmul.accumulator_range`: the exact per-column accumulator bounds, attained."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prover.inttypes import int_type
from prover.matmul import accumulator_range


@pytest.mark.parametrize("a_type", ["int8", "uint8", "int16"])
def test_bounds_are_the_least_and_greatest_accumulator_over_every_input_row(a_type):
    """On tiny columns every input row is tried (the corners of the input box suffice,
    and all of them are enumerated): the bounds are attained and never exceeded, with
    weight and input zero points anywhere in range, a bias, and zero weights."""
    rng = np.random.default_rng(1)
    t = int_type(a_type)
    for _ in range(20):
        K, N = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        w = rng.integers(-128, 128, size=(K, N))
        w[rng.random((K, N)) < 0.2] = 0
        w_zp = rng.integers(-3, 4, size=N)
        a_zp = int(rng.integers(t.min, t.max + 1))
        bias = rng.integers(-500, 500, size=N)
        r = accumulator_range(w, w_zp, t, a_zp, bias)
        rows = np.array(list(itertools.product((t.min, t.max), repeat=K)), dtype=np.int64)
        acc = (rows - a_zp) @ (w - w_zp) + bias
        assert r.lo == tuple(int(v) for v in acc.min(axis=0))
        assert r.hi == tuple(int(v) for v in acc.max(axis=0))


def test_a_column_of_zero_coefficients_is_its_bias():
    r = accumulator_range(np.array([[3], [3]]), 3, int_type("int8"), -128, [7])
    assert (r.lo, r.hi) == ((7,), (7,))


@pytest.mark.parametrize("w_type", ["int8", "uint8", "int16"])
def test_narrow_weights_give_the_bounds_of_their_int64_values(w_type):
    """8-bit weight arrays (as read from a model) and 16-bit ones (as the IR stores them)
    take narrower paths: the same bounds as the same values in int64, with per-column and
    scalar zero points at the type's ends."""
    rng = np.random.default_rng(2)
    t = int_type(w_type)
    w = rng.integers(t.min, t.max + 1, size=(300, 17)).astype(t.numpy_dtype())
    w[:, 0] = t.max
    w[:, 1] = t.min
    for w_zp in (0, t.min, t.max, rng.integers(t.min, t.max + 1, size=17)):
        for a_type, a_zp in (("uint8", 255), ("int8", -128), ("int8", 3)):
            got = accumulator_range(w, w_zp, int_type(a_type), a_zp, np.arange(17))
            want = accumulator_range(
                w.astype(np.int64), w_zp, int_type(a_type), a_zp, np.arange(17)
            )
            assert got == want
