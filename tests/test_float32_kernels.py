"""The float32 steps of ORT's quantized element-wise kernels, against plain float64 forms.

`cvtps_epi32` rounds in float32 and `pack_saturate` clips once; the forms here round in
float64 and saturate twice, as the intrinsics are documented. The grid the enumeration
lays out is every point's index divided out.
"""

import numpy as np

from prover import enumerate as en
from prover.inttypes import INT16, INT32_MAX, INT32_MIN, int_type
from prover.qlinear_binary import cvtps_epi32, pack_saturate

F32 = np.float32


def _cvt_f64(x: np.ndarray) -> np.ndarray:
    r = np.rint(np.asarray(x, dtype=F32).astype(np.float64))
    ok = np.isfinite(r) & (r >= INT32_MIN) & (r <= INT32_MAX)
    return np.where(ok, r, INT32_MIN).astype(np.int64)


def test_cvtps_epi32_rounds_half_to_even_and_gives_int32_min_outside():
    rng = np.random.default_rng(7)
    edges = [np.nan, np.inf, -np.inf, 2.0**31, -(2.0**31), 2.0**31 - 128, -(2.0**31) - 256,
             0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 8388607.5, 2.0**24 + 2, 3e38, -3e38]  # fmt: skip
    x = np.concatenate([
        np.array(edges, dtype=F32),
        np.arange(-600, 600, 0.25, dtype=F32),
        (rng.standard_normal(50000) * 1e7).astype(F32),
        rng.uniform(-5e9, 5e9, 50000).astype(F32),
    ])  # fmt: skip
    got = cvtps_epi32(x)
    assert got.dtype == np.int64 and np.array_equal(got, _cvt_f64(x))
    assert got[0] == got[1] == got[2] == got[3] == INT32_MIN  # NaN, +-inf, 2^31
    assert got[4] == INT32_MIN and got[5] == 2**31 - 128 and list(got[7:13]) == [0, 2, 2, 0, -2, -2]


def test_pack_saturate_is_the_two_saturations():
    r = np.random.default_rng(3).integers(-(2**33), 2**33, 20000)
    for name in ("int8", "uint8", "int16", "uint16", "int32"):
        t = int_type(name)
        want = np.clip(np.clip(r, INT16.min, INT16.max), t.min, t.max)
        assert np.array_equal(pack_saturate(r, t), want), name


def test_the_enumeration_grid_is_every_points_index_divided_out():
    rng = np.random.default_rng(0)
    for _ in range(100):
        sizes = [int(v) for v in rng.integers(1, 30, int(rng.integers(2, 5)))]
        los = rng.integers(-50, 50, len(sizes)).astype(np.int64)
        idx = np.arange(int(np.prod(sizes)), dtype=np.int64)
        strides = np.cumprod([1] + sizes[::-1][:-1])[::-1]
        want = [(idx // strides[i]) % sizes[i] + los[i] for i in range(len(sizes))]
        got = en._grid(los, sizes)
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)), sizes
