"""PostProcess: one meaning (the epilogue term), evaluated concretely and symbolically."""

import numpy as np
import pytest
import z3
from test_backend_support import fused_post, lut_params, requant_post

from npu_backend.postprocess import (
    PostProcess,
    RequantParams,
    apply_columns,
    post_from_json,
    post_to_json,
)
from npu_backend.target import load_target, requant_from_scale
from prover.domain import NUMPY, Z3, KernelError
from prover.inttypes import INT8
from prover.requant import quantize_multiplier, requant_double, requant_float_concrete
from prover.terms import Var, evaluate, free_vars

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")
ACCS = np.concatenate([np.arange(-3000, 3000, 7), [-(2**31), 2**31 - 1, 0, -1, 1]])


def _lut_ref(table, x, order):
    idx = x + 128 if order == "offset" else np.bitwise_and(x, 255)
    return np.asarray(table)[idx]


def test_float_fused_apply_matches_independent_reference():
    post = fused_post(FLOAT, clip=(-90, 100))
    q = requant_float_concrete(ACCS, np.float32(post.requant.scale), post.requant.zp, INT8)
    ref = _lut_ref(post.lut.table, np.clip(q, -90, 100), "offset")
    assert np.array_equal(post.apply(ACCS), ref)


def test_fixed_fused_apply_matches_independent_reference():
    post = fused_post(FIXED)
    assert post.lut.index_order == "twos_complement"
    rq = post.requant
    assert (rq.multiplier, rq.shift) == quantize_multiplier(0.003)
    q = requant_double(NUMPY, ACCS, rq.multiplier, rq.shift, rq.zp, INT8)
    assert np.array_equal(post.apply(ACCS), _lut_ref(post.lut.table, q, "twos_complement"))


@pytest.mark.parametrize("target", [FLOAT, FIXED], ids=["float", "fixed"])
def test_apply_equals_the_term_in_the_z3_domain(target):
    post = fused_post(target, clip=(-100, 90))
    term = post.epilogue_term(Var("acc"))
    assert free_vars(term) == {"acc"}
    got = post.apply(ACCS[::40])
    for acc, want in zip(ACCS[::40], got, strict=True):
        sym = z3.simplify(evaluate(term, Z3, {"acc": Z3.const(int(acc))}))
        assert sym.as_signed_long() == int(want)


def test_requant_only_post_has_no_lut_stage():
    post = requant_post(FLOAT)
    assert post.epilogue_term(Var("acc")).prim == "requant_float"
    assert post.output_type == "int8" and post.output_zp == 2
    fused = fused_post(FLOAT)
    assert fused.epilogue_term(Var("acc")).prim == "lut"
    assert fused.without_lut() == PostProcess(fused.requant)
    assert fused.output_zp == -128  # from the LUT's build spec


def test_per_column_posts_apply_per_column():
    posts = tuple(requant_post(FLOAT, scale=0.001 * (j + 1), zp=j) for j in range(4))
    acc = np.arange(-2000, 2000, 50).reshape(-1, 4)
    out = apply_columns(posts, acc)
    for j in range(4):
        assert np.array_equal(out[:, j], posts[j].apply(acc[:, j]))
    with pytest.raises(ValueError, match="3 entries for 4"):
        apply_columns(posts[:3], acc)


def test_json_round_trip():
    post = fused_post(FIXED, clip=(-5, 5))
    assert post_from_json(post_to_json(post)) == post
    per_col = (post, requant_post(FIXED))
    assert post_from_json(post_to_json(per_col)) == per_col
    assert post_from_json(None) is None


def test_requant_params_check_rejects_bad_parameters():
    RequantParams("float32", 0, "int8", scale=0.5).check()
    with pytest.raises(KernelError, match="positive"):
        RequantParams("float32", 0, "int8", scale=-1.0).check()
    with pytest.raises(KernelError, match="int32"):
        RequantParams("fixed_double", 0, "int8", multiplier=2**31, shift=0).check()
    with pytest.raises(KernelError, match="zero point"):
        RequantParams("float32", 300, "int8", scale=0.5).check()


def test_requant_from_scale_schemes():
    f = requant_from_scale(0.1, 1, "int8", "float32")
    assert f.scale == float(np.float32(0.1)) and f.multiplier is None
    d = requant_from_scale(0.1, 1, "int8", "fixed_single")
    assert (d.multiplier, d.shift) == quantize_multiplier(0.1) and d.scale is None


def test_lut_params_follow_target_builder():
    a, b = lut_params(FLOAT), lut_params(FIXED)
    assert a.spec.rounding == "half_even" and b.spec.rounding == "half_away"
    assert a.index_order == "offset" and b.index_order == "twos_complement"
    # the same logical sigmoid lands at a different physical index
    assert a.table[128] == evaluate(a.term(Var("x")), NUMPY, {"x": np.int64(0)})


def test_targets_differ_at_a_rounding_half_step():
    """scale 1/2: odd acc is a half step; float32 rounds half to even, gemmlowp's SRDHM half up."""
    acc = np.array([-5, -3, -1, 1, 3, 5, 254, 255, 256, 257])
    f = PostProcess(requant_from_scale(0.5, 0, "int8", "float32")).apply(acc)
    d = PostProcess(requant_from_scale(0.5, 0, "int8", "fixed_double")).apply(acc)
    assert f.tolist() == [-2, -2, 0, 0, 2, 2, 127, 127, 127, 127]  # half even, then saturation
    assert d.tolist() == [-2, -1, 0, 1, 2, 3, 127, 127, 127, 127]  # half toward +infinity
    assert np.abs(f - d).max() == 1
