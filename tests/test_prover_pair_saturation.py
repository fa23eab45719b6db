"""The u8s8 pair-saturating accumulation (MLAS without VNNI) and its per-column decision."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prover.domain import KernelError
from prover.matmul import matmul_acc
from prover.pair_saturation import (
    INT16_MAX,
    column_accs,
    divergent_row,
    pair_bounds,
    pair_saturating_acc,
    reachable_columns,
    saturating_pairs,
    saturating_row,
)


def _naive(a, w, a_zp, w_zp):
    """Scalar MLAS recipe: saturating raw pair sums, then exact zero-point corrections."""
    a = [int(v) for v in a]
    w = [int(v) for v in w]
    k = len(a)
    raw = 0
    for i in range(0, k, 2):
        p = a[i] * w[i] + (a[i + 1] * w[i + 1] if i + 1 < k else 0)
        raw += min(max(p, -32768), 32767)
    return raw - w_zp * sum(a) - a_zp * sum(w) + k * a_zp * w_zp


def test_hand_checked_values():
    # pair (255*127 + 255*127) = 64770 saturates to 32767: excess -32003
    a = np.array([[255, 255]])
    w = np.array([[127], [127]])
    assert int(pair_saturating_acc(a, w)[0, 0]) == 32767
    assert int(matmul_acc(a, w)[0, 0]) == 64770
    # zero points are applied exactly after the saturating raw sum
    got = int(pair_saturating_acc(a, w, a_zp=3, w_zp=-2)[0, 0])
    assert got == 32767 - (-2) * 510 - 3 * 254 + 2 * 3 * (-2)
    # negative side: 255 * (-128 - 128) = -65280 -> -32768
    assert int(pair_saturating_acc(a, np.array([[-128], [-128]]))[0, 0]) == -32768
    # 255 * 128 = 32640 fits: no saturation at the boundary
    assert int(pair_saturating_acc(a, np.array([[64], [64]]))[0, 0]) == 32640
    assert int(pair_saturating_acc(a, np.array([[65], [64]]))[0, 0]) == 32767  # 32895


def test_pairs_are_adjacent_and_odd_k_last_product_stands_alone():
    a = np.array([[255, 0, 255, 255, 255]])
    w = np.array([[127], [127], [127], [127], [-128]])
    # pairs: (0,1) = 32385, (2,3) = 64770 -> 32767, (4) = -32640
    assert int(pair_saturating_acc(a, w)[0, 0]) == 32385 + 32767 - 32640


def test_bruteforce_matches_naive_small_k(rng):
    for k in (1, 2, 3, 4, 5):
        for _ in range(40):
            w = rng.integers(-128, 128, (k, 3))
            w[rng.random((k, 3)) < 0.4] = rng.choice([-128, 127])
            a = rng.integers(0, 256, (6, k))
            a[rng.random((6, k)) < 0.4] = 255
            a_zp = int(rng.integers(0, 256))
            w_zp = rng.integers(-128, 128, 3)
            got = pair_saturating_acc(a, w, a_zp, w_zp)
            for m, n in itertools.product(range(6), range(3)):
                assert int(got[m, n]) == _naive(a[m], w[:, n], a_zp, int(w_zp[n]))


def test_reachability_is_exact_by_enumeration():
    """K = 2: the decision equals 'some (a0, a1) in uint8^2 saturates' over a weight grid."""
    grid = np.arange(256)
    a0, a1 = np.meshgrid(grid, grid)
    for w0, w1 in [(64, 64), (65, 64), (127, 2), (-128, -1), (-64, -64), (-65, -64), (127, -128)]:
        p = a0 * w0 + a1 * w1
        truth = bool(((p > INT16_MAX) | (p < -32768)).any())
        assert bool(reachable_columns(np.array([[w0], [w1]]))[0]) == truth, (w0, w1)
        assert bool(saturating_pairs([w0, w1])) == truth


def test_seven_bit_weights_never_saturate(rng):
    w = rng.integers(-64, 64, (513, 40))
    assert not reachable_columns(w).any()
    lo, hi = pair_bounds(w)
    assert hi.max() <= INT16_MAX and lo.min() >= -32768
    a = rng.integers(0, 256, (8, 513))
    assert np.array_equal(pair_saturating_acc(a, w, 7, 3), matmul_acc(a, w, 7, 3))


def test_saturating_row_differs_whatever_the_zero_points(rng):
    seen = {True: 0, False: 0}
    for _ in range(50):
        w = rng.integers(-128, 128, 9)
        row = saturating_row(w)
        seen[bool(saturating_pairs(w))] += 1
        if not saturating_pairs(w):
            assert row is None
            continue
        exact, sat = column_accs(row, w, int(rng.integers(0, 256)), int(rng.integers(-5, 5)), 11)
        assert exact != sat
    assert seen[True] and seen[False], seen  # both branches ran: the loop is not vacuous


def test_divergent_row_meets_the_predicate():
    w = np.array([100, 100] + [3, -5, 7, 1] * 8)

    # an epilogue that only tells values apart in a narrow band: floor(acc / 4096)
    def differs(e, s):
        return (np.clip(e, -8192, 8191) >> 12) != (np.clip(s, -8192, 8191) >> 12)

    row = divergent_row(w, 0, 128, 0, differs)
    assert row is not None
    exact, sat = column_accs(row, w, 128, 0, 0)
    assert differs(np.array([exact]), np.array([sat]))[0]
    assert divergent_row(w, 0, 128, 0, lambda e, s: np.zeros(e.shape, bool)) is None
    assert divergent_row(np.array([1, 2, 3]), 0, 0, 0, lambda e, s: e != s) is None


def test_rejects_non_u8s8_operands():
    with pytest.raises(KernelError):
        pair_saturating_acc(np.array([[-1, 3]]), np.array([[1], [2]]))
    with pytest.raises(KernelError):
        pair_saturating_acc(np.array([[1, 3]]), np.array([[200], [2]]))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int64"])
@pytest.mark.parametrize("k", [1, 6, 7])
def test_pair_bounds_in_narrow_types_are_the_int64_ones(dtype, k):
    """`pair_bounds` computes 8- and 16-bit weights in int32: the bounds (and the columns
    that can saturate) are the int64 computation's, the type's extremes included."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(k)
    lo_v, hi_v = max(int(info.min), -40000), min(int(info.max), 40000)
    w = rng.integers(lo_v, hi_v, size=(k, 40), endpoint=True).astype(dtype)
    w[:, 0], w[:, 1] = (
        info.max if info.max < 1 << 20 else hi_v,
        info.min if info.min > -(1 << 20) else lo_v,
    )
    w64 = w.astype(np.int64)
    padded = np.vstack([w64, np.zeros((k % 2, 40), dtype=np.int64)]).reshape(-1, 2, 40)
    want_hi = 255 * np.maximum(padded, 0).sum(axis=1)
    want_lo = 255 * np.minimum(padded, 0).sum(axis=1)
    lo, hi = pair_bounds(w)
    assert np.array_equal(lo, want_lo) and np.array_equal(hi, want_hi)
    want = ((want_hi > 32767) | (want_lo < -32768)).any(axis=0)
    assert np.array_equal(reachable_columns(w), want)
