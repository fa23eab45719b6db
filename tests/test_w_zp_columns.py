"""`NpuMatMul.w_zp_columns`: a column tile's weight zero points, the one slicing codegen
emits, codegen's column check and the compiler's `tile_columns` plan use (three copies
before; codegen's two took only a Python int as scalar and kept numpy elements)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_backend_schedule import FLOAT, model, per_channel_post, tiling_target

from compiler.passes.tile_columns import emitted_tiles, planned_tiles
from npu_backend.codegen import CodegenError, check_column_tiles, generate
from npu_backend.isa import MatMul
from npu_backend.schedule import choose_schedule


@pytest.mark.parametrize(
    "w_zp,want",
    [
        (3, 3),
        (np.int64(-2), -2),
        (np.array(5), 5),
        ((1, 2, 3, 4, 5), (2, 3, 4)),
        (np.arange(5, dtype=np.int8), (1, 2, 3)),
    ],
)
def test_slice(w_zp, want):
    st = model(None, 2, 4, 5, w_zp=0).steps[0]
    got = dataclasses.replace(st, w_zp=w_zp).w_zp_columns(1, 4)
    assert got == want and all(type(v) is int for v in np.atleast_1d(got).tolist())
    assert type(got) in (int, tuple)


ZPS = tuple(range(-4, 17))  # n = 21 columns, tiles of 8


@pytest.mark.parametrize(
    "w_zp,per_tile",
    [
        (ZPS, [ZPS[a : a + 8] for a in range(0, 21, 8)]),
        (np.array(ZPS), [ZPS[a : a + 8] for a in range(0, 21, 8)]),
        (np.int64(3), [3, 3, 3]),  # a numpy scalar: codegen's copy tried to slice it
    ],
    ids=["tuple", "array", "numpy_scalar"],
)
def test_tiled_program_and_plan_agree_for_any_zero_point_form(w_zp, per_tile):
    n = 21
    post = per_channel_post(FLOAT, n, lut=True)
    m = model(post, 5, 40, n, tile=(4, 8, 16), w_zp=w_zp)
    target = tiling_target()
    prog = generate(m, target)
    mms = prog.ops(MatMul)
    assert [i.w_zp for i in mms] == per_tile
    step = m.steps[0]
    sch = choose_schedule(step, (5, 40), n, False, target)
    assert planned_tiles(step, sch) == emitted_tiles(prog, step.name, n)
    if np.ndim(w_zp):  # negative: a tile carrying its neighbour's zero points is rejected
        bad = [mms[0], dataclasses.replace(mms[1], w_zp=ZPS[:8]), *mms[2:]]
        with pytest.raises(CodegenError, match="weight zero points"):
            check_column_tiles(step, sch, bad)
