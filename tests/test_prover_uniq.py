"""`prover.uniq.unique` is `np.unique` for 1-D arrays (the hot paths use it instead)."""

from __future__ import annotations

import numpy as np

from prover.uniq import unique


def test_unique_equals_numpys_on_random_and_edge_arrays():
    rng = np.random.default_rng(25)
    cases = [
        np.array([], dtype=np.int64),
        np.array([5], dtype=np.int64),
        np.array([3, 3, 3], dtype=np.int64),
        np.array([-(2**62), 2**62, 0, 0], dtype=np.int64),
        rng.integers(-1000, 1000, 5000),
        rng.integers(-(2**40), 2**40, 300),
        np.linspace(-7, 7, 41).round().astype(np.int64),
    ]
    for a in cases:
        got, want = unique(a), np.unique(a)
        assert got.dtype == want.dtype and np.array_equal(got, want)
