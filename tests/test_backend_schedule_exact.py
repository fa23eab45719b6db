"""Fast simulator kernels stay exact: float64 matmul only where provable, grouped epilogues."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_backend_support import lut_params

from npu_backend.exact_matmul import EXACT_LIMIT, exact_matmul, float64_is_exact
from npu_backend.postprocess import PostProcess, apply_columns
from npu_backend.target import load_target, requant_from_scale
from prover.matmul import matmul_acc

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def test_the_exactness_bound_is_strict():
    assert EXACT_LIMIT == 2**53
    assert not float64_is_exact(2**26, 2**26, 2)  # K * max|a| * max|w| == 2^53
    assert float64_is_exact(2**26, 2**26 - 1, 2)
    assert float64_is_exact(2**26, 2**26, 1)
    assert not float64_is_exact(255, 255, 2**53 // (255 * 255) + 1)


def test_above_the_bound_the_int64_path_gives_the_exact_sum():
    """(2^27 + 1)(2^26 + 1) * 2 = 2^54 + ... + 2: float64 rounds it, int64 does not."""
    a = np.full((1, 2), 2**27 + 1, dtype=np.int64)
    w = np.full((2, 1), 2**26 + 1, dtype=np.int64)
    exact = 2 * (2**27 + 1) * (2**26 + 1)
    assert (
        int((a.astype(np.float64) @ w.astype(np.float64))[0, 0]) != exact
    )  # float64 would be wrong
    assert int(exact_matmul(a, w)[0, 0]) == exact
    assert int(exact_matmul(a + 5, w, a_zp=5)[0, 0]) == exact  # zero points count in the bound


def test_just_below_the_bound_the_float_path_is_exact():
    rng = np.random.default_rng(0)
    k = 4
    top = int(((EXACT_LIMIT - 1) // k) ** 0.5)
    assert float64_is_exact(top, top, k)
    a = rng.integers(-top, top + 1, (7, k))
    w = rng.integers(-top, top + 1, (k, 5))
    a[0, :] = top
    w[:, 0] = top
    bias = rng.integers(-(2**31), 2**31, 5)
    np.testing.assert_array_equal(exact_matmul(a, w, 0, 0, bias), matmul_acc(a, w, 0, 0, bias))


@pytest.mark.parametrize("seed", range(4))
def test_int8_matmuls_equal_the_kernel(seed):
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(1, 300, 3))
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w_zp = rng.integers(-128, 128, n)
    bias = rng.integers(-(2**20), 2**20, n).astype(np.int32)
    got = exact_matmul(a, w, 7, w_zp, bias)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, matmul_acc(a, w, 7, w_zp, bias))


def _one_by_one(post, acc):
    return np.stack([post[j].apply(acc[:, j]) for j in range(len(post))], axis=1)


def test_grouped_epilogues_equal_column_by_column_evaluation():
    rng = np.random.default_rng(3)
    n = 300
    sig, tanh = lut_params(FLOAT, "sigmoid"), lut_params(FLOAT, "tanh")
    posts = []
    for j in range(n):
        rq = requant_from_scale(
            float(0.0004 * (1 + 3 * rng.random())), int(j % 5) - 2, "int8", "float32"
        )
        kind = j % 4
        if kind == 0:
            posts.append(PostProcess(rq, function="sigmoid", lut=sig))
        elif kind == 1:
            posts.append(PostProcess(rq, clip=(-50, 90), function="tanh", lut=tanh))
        elif kind == 2:
            posts.append(PostProcess(rq))
        else:  # a fixed-point column among them: evaluated on its own
            fx = requant_from_scale(0.0007, 1, "int8", "fixed_double")
            posts.append(PostProcess(fx))
    posts[7] = posts[3]  # identical columns
    posts[9] = dataclasses.replace(posts[1])  # equal columns, another object
    posts[13] = posts[17] = posts[5]  # one object in three columns
    only = PostProcess(requant_from_scale(0.0011, 0, "int8", "float32"), clip=(-9, 9))
    posts[20] = posts[24] = only  # a float32 tail no other column has, in two columns
    post = tuple(posts)
    acc = rng.integers(-(2**22), 2**22, (33, n))
    acc[0, :] = 2**31 - 1
    acc[1, :] = -(2**31)
    np.testing.assert_array_equal(apply_columns(post, acc), _one_by_one(post, acc))
    # a tiled MatMul applies the same epilogue again: its grouping is reused, same values
    from npu_backend import postprocess as pp

    plan = pp._column_plan(post)
    assert pp._column_plan(post) is plan
    np.testing.assert_array_equal(apply_columns(post, acc[5:9]), _one_by_one(post, acc[5:9]))
    # an equal epilogue that is another object gets its own grouping, with the same values
    other = tuple(posts)
    assert other == post and other is not post and pp._column_plan(other) is not plan
    np.testing.assert_array_equal(apply_columns(other, acc), _one_by_one(post, acc))


def test_a_per_channel_epilogue_as_made_is_one_float_group_of_its_columns_in_order(monkeypatch):
    """Distinct posts with float32 requantizers sharing their later stages (the same
    objects: `with_requants`) are planned at once as one float32 group, the grouping the
    general plan gives; a shared object, or an equal stage that is another object, takes
    the general plan. The values equal column-by-column evaluation either way."""
    from npu_backend import postprocess as pp

    rng = np.random.default_rng(5)
    n = 64
    p = PostProcess(requant_from_scale(0.001, 1, "int8", "float32"), (-60, 90), "sigmoid",
                    lut_params(FLOAT, "sigmoid"))  # fmt: skip
    scales = [float(np.float32(v)) for v in 0.0004 * (1 + 3 * rng.random(n))]
    post = tuple(p.with_requants(p.requant.with_scales(scales)))
    acc = rng.integers(-(2**20), 2**20, (17, n))
    one = pp._one_float_group
    fast = one(post)
    assert fast is not None and fast.cols == list(range(n)) and fast.members == list(post)
    np.testing.assert_array_equal(apply_columns(post, acc), _one_by_one(post, acc))
    (planned,), others = pp._column_plan(post)  # planned at once, kept by identity
    assert others == [] and planned.cols == fast.cols and planned.members == fast.members
    monkeypatch.setattr(pp, "_one_float_group", lambda post: None)  # the general grouping
    (whole,), rest = pp._column_plan(tuple(list(post)))  # another tuple: planned again
    assert rest == [] and whole.cols == fast.cols and whole.members == fast.members
    assert np.array_equal(whole.scales, fast.scales) and np.array_equal(whole.zps, fast.zps)
    shared = (*post[:5], post[3], *post[6:])  # one object in two columns
    assert one(shared) is None
    np.testing.assert_array_equal(apply_columns(shared, acc), _one_by_one(shared, acc))
    twin = dataclasses.replace(post[7], lut=dataclasses.replace(post[7].lut))
    apart = (*post[:7], twin, *post[8:])  # an equal table that is another object
    assert one(apart) is None
    np.testing.assert_array_equal(apply_columns(apart, acc), _one_by_one(apart, acc))


def test_large_operands_near_their_zero_point_take_the_int64_path():
    """|a - a_zp| <= 1 but a and a_zp are beyond 2^53: float64 would round both to 2^60."""
    a = np.array([[2**60 + 1, 2**60 + 3]], dtype=np.int64)
    w = np.array([[1], [-1]], dtype=np.int64)
    assert int(exact_matmul(a, w, 2**60 + 2)[0, 0]) == -2
    assert int(exact_matmul(w.T, a.T, 0, 2**60 + 2)[0, 0]) == -2  # the same on the w side


@pytest.mark.parametrize("seed", range(8))
def test_mixed_types_and_zero_points_equal_the_kernel(seed):
    """uint8/int8/int16 operands, scalar or per-column weight zero points, batch dims."""
    rng = np.random.default_rng(100 + seed)
    types = (np.uint8, np.int8, np.int16)
    at, wt = types[seed % 3], types[(seed // 3) % 3]
    lo_a, hi_a = np.iinfo(at).min, np.iinfo(at).max
    lo_w, hi_w = np.iinfo(wt).min, np.iinfo(wt).max
    m, k, n = (int(v) for v in rng.integers(1, 90, 3))
    batch = (2,) if seed % 2 else ()
    a = rng.integers(lo_a, hi_a + 1, batch + (m, k)).astype(at)
    w = rng.integers(lo_w, hi_w + 1, (k, n)).astype(wt)
    a[..., 0, :] = hi_a  # the extremes are present
    w[:, 0] = lo_w
    a_zp = int(rng.integers(lo_a, hi_a + 1))
    w_zp = rng.integers(lo_w, hi_w + 1, n) if seed % 4 < 2 else int(rng.integers(lo_w, hi_w + 1))
    bias = rng.integers(-(2**31), 2**31, n)
    np.testing.assert_array_equal(
        exact_matmul(a, w, a_zp, w_zp, bias), matmul_acc(a, w, a_zp, w_zp, bias)
    )


def test_float32_chunks_are_the_largest_exact_ones():
    from npu_backend.exact_matmul import FLOAT32_LIMIT, float32_chunk

    assert FLOAT32_LIMIT == 2**24
    assert float32_chunk(128, 128, 4096) == 1023  # 1023 * 2^14 < 2^24 <= 1024 * 2^14
    assert float32_chunk(255, 128, 4096) == 514
    assert float32_chunk(128, 128, 100) == 100
    assert float32_chunk(0, 128, 4096) == 4096
    assert float32_chunk(2**12, 2**12, 4096) == 0  # one product reaches 2^24


@pytest.mark.parametrize("a_zp", [0, 127])
def test_k_beyond_one_float32_chunk_is_summed_exactly(a_zp):
    """Products near the extreme: one float32 matmul would round, the chunks do not."""
    k = 3001
    a = np.full((3, k), -127, dtype=np.int8)  # odd products: sums beyond 2^24 need all bits
    w = np.full((k, 4), -127, dtype=np.int8)
    a[2, 0], w[0, 3] = -128, -128
    w[::7, 1] = 127
    a[1, ::5] = 1
    want = matmul_acc(a, w, a_zp, 0)
    naive = ((a.astype(np.float32) - a_zp) @ w.astype(np.float32)).astype(np.int64)
    assert (naive != want).any()  # the test can fail
    np.testing.assert_array_equal(exact_matmul(a, w, a_zp, 0), want)


@pytest.mark.parametrize(
    "dtype, x_zp, group, pads",
    [
        (np.int8, 0, 1, (1, 1, 1, 1)),
        (np.uint8, 131, 4, (0, 1, 2, 0)),
        (np.uint8, 7, 8, (1, 0, 1, 0)),
    ],
)
def test_a_convs_accumulator_by_blas_is_the_int64_one(dtype, x_zp, group, pads):
    """The simulator's conv (`prover.conv.conv_acc` with `exact_matmul` per group: depthwise,
    grouped, padded with the zero point, uint8 with zero points) equals the int64 one."""
    from prover.conv import Window, conv_acc

    rng = np.random.default_rng(group)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 9, 7, 8)).astype(dtype)
    k_g = (8 // group) * 9
    w = rng.integers(-128, 128, (k_g, 16)).astype(np.int8)
    win = Window((3, 3), (2, 1), (1, 1), pads, group, 8)
    w_zp = rng.integers(-3, 4, 16)
    bias = rng.integers(-1000, 1000, 16)
    want = conv_acc(x, w, win, x_zp, w_zp, bias)
    got = conv_acc(x, w, win, x_zp, w_zp, bias, matmul=exact_matmul)
    assert got.dtype == want.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    cols = conv_acc(x, w, win, x_zp, w_zp[4:12], bias[4:12], (4, 12), matmul=exact_matmul)
    np.testing.assert_array_equal(cols, want[..., 4:12])


def test_a_convs_accumulator_beyond_float_exactness_is_still_exact():
    """int64 activations far from any float: no BLAS form is exact, the int64 one runs."""
    from prover.conv import Window, conv_acc

    x = np.full((1, 3, 3, 1), 2**52 + 1, dtype=np.int64)
    w = np.ones((9, 1), dtype=np.int64)
    win = Window((3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1, 1)
    got = conv_acc(x, w, win, 0, 0, None, matmul=exact_matmul)
    assert int(got.reshape(-1)[0]) == 9 * (2**52 + 1)
