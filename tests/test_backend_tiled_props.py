"""Tiled MatMul execution is bit-identical to untiled and to the int64 reference, over
random shapes, tiles (edge tiles in M, N and K), operand types, zero points and epilogues."""

from __future__ import annotations

import numpy as np
import pytest
from test_backend_schedule import FIXED, FLOAT, per_channel_post, tiling_target
from test_backend_support import fused_post, requant_post

from npu_backend.codegen import generate
from npu_backend.isa import MatMul
from npu_backend.lowered import LoweredModel, NpuMatMul, TensorSpec
from npu_backend.simulator import UndefinedResult, run

TYPES = ("int8", "uint8")


def _model(post, x, w, b, a_zp, w_zp, tile) -> LoweredModel:
    x_type = str(x.dtype)
    step = NpuMatMul(
        name="mm", a="x", w="w", out="y", a_zp=a_zp, w_zp=w_zp, bias=None if b is None else "b",
        a_type=x_type, w_type=str(w.dtype), post=post, tile=tile,
    )  # fmt: skip
    consts = {"w": w} if b is None else {"w": w, "b": b}
    return LoweredModel([TensorSpec("x", x_type, x.shape)], ["y"], consts, [step])


def _case(seed: int):
    rng = np.random.default_rng(1000 + seed)
    m, k, n = (int(v) for v in rng.integers(1, 60, 3))
    at, wt = TYPES[seed % 2], TYPES[(seed // 2) % 2]
    ai, wi = np.iinfo(at), np.iinfo(wt)
    w = rng.integers(wi.min, wi.max + 1, (k, n)).astype(wt)
    x = rng.integers(ai.min, ai.max + 1, (m, k)).astype(at)
    a_zp = int(rng.integers(ai.min, ai.max + 1))
    per_col = seed % 3 != 0
    w_zp = (
        tuple(int(v) for v in rng.integers(wi.min, wi.max + 1, n))
        if per_col
        else int(rng.integers(wi.min, wi.max + 1))
    )
    b = None if seed % 5 == 4 else rng.integers(-5000, 5000, n).astype(np.int32)
    tile = tuple(int(v) for v in rng.integers(1, 20, 3))
    return rng, x, w, b, a_zp, w_zp, tile


def _reference(x, w, b, a_zp, w_zp) -> np.ndarray:
    acc = (x.astype(np.int64) - a_zp) @ (w.astype(np.int64) - np.asarray(w_zp, dtype=np.int64))
    return acc if b is None else acc + b.astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_raw_tiled_accumulator_equals_the_int64_reference(seed):
    _, x, w, b, a_zp, w_zp, tile = _case(seed)
    prog = generate(_model(None, x, w, b, a_zp, w_zp, tile), tiling_target())
    assert {i.structure for i in prog.ops(MatMul)} == {"tiled"}
    got, _ = run(prog, {"x": x})
    np.testing.assert_array_equal(got["y"], _reference(x, w, b, a_zp, w_zp))


@pytest.mark.parametrize("seed", range(12))
def test_tiled_epilogues_equal_untiled(seed):
    """Per-channel and per-tensor epilogues (requant, clip, table), float and fixed targets."""
    rng, x, w, b, a_zp, w_zp, tile = _case(seed)
    n = w.shape[1]
    target = FLOAT if seed % 2 else FIXED
    kind = seed % 4
    if kind == 0:
        post = per_channel_post(target, n, lut=True, seed=seed)
    elif kind == 1:
        post = per_channel_post(target, n, lut=False, seed=seed)
    elif kind == 2:
        post = fused_post(target, scale=0.0007)
    else:
        post = requant_post(target, scale=0.0007)
    allowing = tiling_target(target)
    want, _ = run(generate(_model(post, x, w, b, a_zp, w_zp, None), allowing), {"x": x})
    prog = generate(_model(post, x, w, b, a_zp, w_zp, tile), allowing)
    got, _ = run(prog, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
    assert got["y"].dtype == want["y"].dtype


def _edge_programs(post, bias: int):
    """A K-tiled and an untiled program whose bias is swapped after codegen (as a program
    file could carry it): the first K tile's partial sum leaves int32, the full sum is `bias`
    plus 2 * 127 * 127 - 2 * 127 * 127."""
    w = np.array([[127], [127], [-127], [-127]], dtype=np.int8)
    b = np.zeros(1, dtype=np.int32)
    x = np.full((1, 4), 127, dtype=np.int8)
    progs = []
    for tile in (None, (1, 1, 2)):
        prog = generate(_model(post, x, w, b, 0, 0, tile), tiling_target())
        prog.constants["b"] = np.array([bias], dtype=np.int32)
        progs.append(prog)
    return progs, {"x": x}


def test_a_partial_k_sum_outside_int32_does_not_change_the_result():
    untiled, tiled = _edge_programs(None, 2**31 - 100)[0]
    x = _edge_programs(None, 0)[1]
    want, _ = run(untiled, x)
    got, _ = run(tiled, x)
    assert int(want["y"][0, 0]) == 2**31 - 100
    np.testing.assert_array_equal(got["y"], want["y"])
    post = per_channel_post(FLOAT, 1, lut=False)
    untiled, tiled = _edge_programs(post, 2**31 - 100)[0]
    np.testing.assert_array_equal(run(tiled, x)[0]["y"], run(untiled, x)[0]["y"])


def test_a_full_sum_outside_int32_is_refused_tiled_and_untiled():
    """With a per-column epilogue (grouped float32 requantization) the result is undefined."""
    rq = per_channel_post(FLOAT, 2, lut=False)
    w = np.array([[127, 1], [127, 1]], dtype=np.int8)
    x = np.full((1, 2), 127, dtype=np.int8)
    for tile in (None, (1, 2, 1)):
        prog = generate(_model(rq, x, w, np.zeros(2, np.int32), 0, 0, tile), tiling_target())
        prog.constants["b"] = np.array([2**31 - 100, 0], dtype=np.int32)
        with pytest.raises(UndefinedResult, match="int32"):
            run(prog, {"x": x})
