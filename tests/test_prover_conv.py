"""prover.conv against the ONNX definition written as loops, and its pair-saturation test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prover.conv import Window, any_pair_saturable, conv_acc, row_tile
from prover.domain import KernelError


def _loops(x, W, win: Window, x_zp, w_zp, bias):
    """ONNX's conv of NCHW-ordered meaning, on channels-last x [N, H, W, C], W [M, C/g, kh, kw]."""
    n_, h, w_, c = x.shape
    m = W.shape[0]
    oh, ow = win.out_spatial((h, w_))
    per_in, per_out = c // win.group, m // win.group
    out = np.zeros((n_, oh, ow, m), dtype=np.int64)
    for b, i, j, o in itertools.product(range(n_), range(oh), range(ow), range(m)):
        g = o // per_out
        acc = int(bias[o]) if bias is not None else 0
        for ci, ki, kj in itertools.product(range(per_in), *map(range, win.kernel)):
            y = i * win.strides[0] - win.pads[0] + ki * win.dilations[0]
            z = j * win.strides[1] - win.pads[1] + kj * win.dilations[1]
            v = x[b, y, z, g * per_in + ci] if 0 <= y < h and 0 <= z < w_ else x_zp
            acc += (int(v) - x_zp) * (int(W[o, ci, ki, kj]) - int(w_zp[o]))
        out[b, i, j, o] = acc
    return out


@pytest.mark.parametrize(
    "win,c,m",
    [
        (Window((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, 3), 3, 4),
        (Window((2, 3), (2, 1), (1, 2), (0, 2, 1, 0), 2, 4), 4, 6),
        (Window((3, 3), (2, 2), (1, 1), (1, 0, 2, 1), 4, 4), 4, 8),
        (Window((3, 3), (1, 2), (2, 1), (2, 1, 0, 1), 5, 5), 5, 5),  # depthwise
    ],
)
def test_conv_acc_is_the_onnx_definition(win, c, m):
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, size=(2, 6, 5, c))
    W = rng.integers(-128, 128, size=(m, c // win.group, *win.kernel))
    w_zp = rng.integers(-5, 5, size=m)
    bias = rng.integers(-1000, 1000, size=m)
    w = W.reshape(m, -1).T
    want = _loops(x, W, win, -7, w_zp, bias)
    np.testing.assert_array_equal(conv_acc(x, w, win, -7, w_zp, bias), want)
    # a column range (crossing groups) and row tiles with their halo give the same elements
    n0, n1 = 1, m - 1
    got = conv_acc(x, w, win, -7, w_zp[n0:n1], bias[n0:n1], (n0, n1))
    np.testing.assert_array_equal(got, want[..., n0:n1])
    per = m // win.group  # whole groups past the first (one batched matmul of them)
    if win.group > 1:
        got = conv_acc(x, w, win, -7, w_zp[per:], bias[per:], (per, m))
        np.testing.assert_array_equal(got, want[..., per:])
    oh = want.shape[1]
    for r0 in range(oh):
        slab, sub = row_tile(win, x, r0, r0 + 1, -7)
        np.testing.assert_array_equal(conv_acc(slab, w, sub, -7, w_zp, bias), want[:, r0 : r0 + 1])


def test_window_rejects_bad_forms():
    with pytest.raises(KernelError):
        Window((3,), (1, 1), (1,), (0, 0))
    with pytest.raises(KernelError):
        Window((3, 3), (1, 1), (1, 1), (0, 0, 0, 0)).out_spatial((2, 5))
    with pytest.raises(KernelError):
        Window((1, 1), (0, 1), (1, 1), (0, 0, 0, 0))


def test_any_pair_saturable_is_every_pair_in_any_order():
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, size=(5, 40))
    w[:, 0] = [64, 65, -1, 0, 3]  # 255 * 129 > 32767: saturable
    w[:, 1] = [64, 64, -64, -64, 0]  # 255 * 128 = 32640, -255 * 128 = -32640: never
    brute = [
        any(
            not -32768 <= 255 * (max(a, 0) + max(b, 0)) <= 32767
            or not -32768 <= 255 * (min(a, 0) + min(b, 0)) <= 32767
            for a, b in itertools.combinations(w[:, j], 2)
        )
        for j in range(w.shape[1])
    ]
    assert list(any_pair_saturable(w)) == brute
    assert brute[0] and not brute[1]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 9, 64])
def test_any_pair_saturable_is_the_two_extreme_weights_test_on_every_column(k):
    """Per column: some two products of 255 and a weight leave int16 exactly when the two
    greatest (or the two least) weights do; checked against every pair of the column, on
    narrow and int64 weights, with the extremes (127, -128) repeated."""
    rng = np.random.default_rng(k)
    w = rng.integers(-128, 128, size=(k, 40))
    w[: min(k, 2), 4] = 127
    w[: min(k, 2), 5] = -128
    for arr in (w.astype(np.int8), w.astype(np.int16), w.astype(np.int64)):
        got = any_pair_saturable(arr)
        for j in range(w.shape[1]):
            col = [int(v) for v in w[:, j]]
            want = any(not -32768 <= 255 * (a + b) <= 32767
                       for i, a in enumerate(col) for b in col[i + 1 :])  # fmt: skip
            assert bool(got[j]) == want, (k, j)
