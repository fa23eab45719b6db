"""`ColumnPosts`: a per-channel epilogue held as one post and the columns' float32 scales.

It must be the tuple of its columns' posts wherever it is read (equality, hash, items,
validation, the simulator, codegen's records, the program file, the ledger), while a
check of a per-channel model makes no per-column post at all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import compiler.ir.fuse as fuse
import compiler.passes.lower as lower
from compiler.api import compile_model
from compiler.ir.column_group import FilledGroup
from npu_backend.codegen import generate
from npu_backend.ledger import model_ledger
from npu_backend.lowered import NpuMatMul, unfuse
from npu_backend.postprocess import (
    ColumnPosts,
    LutParams,
    PostProcess,
    RequantParams,
    alike_key,
    apply_columns,
    record_nbytes,
)
from npu_backend.target import load_target
from npu_backend.validate import validate_step
from prover.domain import KernelError
from prover.terms import PreconditionViolation

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "examples" / "zoo" / "small"
FLOAT = load_target()
TABLE = tuple(range(-128, 128))
LUT = LutParams(TABLE, "int8", "int8", "offset")
SCALES = (0.0005, 0.00025, 0.0005, 0.001, 0.002)


def first(scale: float = SCALES[0], **changes) -> PostProcess:
    post = PostProcess(RequantParams("float32", 3, "int8", scale=scale), None, "sigmoid", LUT)
    return dataclasses.replace(post, **({"out_type": "int8", "out_zp": -128} | changes))


def by_column(p: PostProcess, scales) -> tuple[PostProcess, ...]:
    """The general form: each column's post built alone."""
    return tuple(
        dataclasses.replace(p, requant=dataclasses.replace(p.requant, scale=s)) for s in scales
    )


def test_it_is_the_tuple_of_its_columns():
    cp = ColumnPosts(first(), SCALES)
    want = by_column(first(), SCALES)
    assert cp == want and want == cp and hash(cp) == hash(want)
    assert len(cp) == 5 and tuple(cp) == want and cp[3] == want[3] and cp[1:3] == want[1:3]
    assert cp[0] is cp.first and cp[2] is cp[0]  # columns of one scale share one post
    assert cp.distinct_count() == 4 and record_nbytes(cp) == record_nbytes(want)


def test_it_pickles_as_its_first_post_and_scales():
    import pickle

    cp = ColumnPosts(first(), SCALES)
    back = pickle.loads(pickle.dumps(cp))
    assert isinstance(back, ColumnPosts) and back == cp and back._items is None
    assert tuple(back) == by_column(first(), SCALES)


def test_equality_with_a_tuple_makes_no_post():
    cp = ColumnPosts(first(), SCALES)
    assert cp == by_column(first(), SCALES) and cp._items is None
    assert cp != by_column(first(), SCALES[:4])  # another length
    assert cp != by_column(first(), (*SCALES[:4], 0.004))  # another scale
    assert cp != by_column(first(out_zp=-127), SCALES)  # another field
    assert cp != ColumnPosts(first(out_zp=-127), SCALES)
    assert cp == ColumnPosts(first(SCALES[3]), SCALES)  # its first's own scale is not a column's
    assert cp._items is None


def test_alike_key_is_one_for_both_forms():
    cp = ColumnPosts(first(), SCALES)
    assert alike_key(by_column(first(), SCALES)) == alike_key(cp)
    assert alike_key((*by_column(first(), SCALES[:4]), first(out_zp=0))) is None
    assert alike_key(by_column(first(), SCALES[:4])) != alike_key(cp)


def step_with(post) -> NpuMatMul:
    return NpuMatMul(
        name="mm", a="x", w="w", out="y", a_zp=0, w_zp=0, bias=None, a_type="int8",
        w_type="int8",
        post=post,
    )  # fmt: skip


@pytest.mark.parametrize(
    "post, scales",
    [
        (first(), SCALES),  # valid
        (first(function="gelu_erf_unknown"), SCALES),  # a stage issue, listed per distinct post
        (first(lut=dataclasses.replace(LUT, in_type="uint8")), SCALES),
        (first(), (*SCALES[:4], 0.0)),  # an invalid requantizer: read column by column
        (first(), (*SCALES[:4], -0.001)),
    ],
)
def test_validation_reads_the_first_post_and_the_scales_as_the_columns(post, scales):
    got = validate_step(step_with(ColumnPosts(post, scales)), FLOAT)
    want = validate_step(step_with(by_column(post, scales)), FLOAT)
    assert [(i.code, i.message) for i in got] == [(i.code, i.message) for i in want]
    if post == first() and scales == SCALES:
        assert got == []
    else:
        assert got


def test_the_simulator_applies_it_as_its_columns():
    acc = np.random.default_rng(0).integers(-(2**20), 2**20, (7, 5))
    cp = ColumnPosts(first(), SCALES)
    np.testing.assert_array_equal(
        apply_columns(cp, acc), apply_columns(by_column(first(), SCALES), acc)
    )
    with pytest.raises(PreconditionViolation):
        apply_columns(cp, acc + 2**31)
    bad = (*SCALES[:4], 0.0)
    with pytest.raises(KernelError, match="finite and positive"):
        apply_columns(ColumnPosts(first(), bad), acc)
    with pytest.raises(KernelError, match="finite and positive"):
        apply_columns(by_column(first(), bad), acc)


def test_the_unfused_form_keeps_the_scales():
    cp = ColumnPosts(first(), SCALES)
    (mm_a, act_a), (mm_b, act_b) = (
        unfuse(step_with(cp)),
        unfuse(step_with(by_column(first(), SCALES))),
    )
    assert isinstance(mm_a.post, ColumnPosts) and mm_a.post == mm_b.post and act_a == act_b
    assert all(p.lut is None for p in mm_a.post)


@pytest.mark.parametrize(
    "name",
    [
        "mlp__qop_s8s8_pc.onnx",
        "mlp__qdq_u8s8_pc.onnx",
        "mlp__qop_u8s8_pc.onnx",
        "tiny_cnn__qdq_u8s8_pc.onnx",  # unfused per-channel convolutions only
    ],
)
def test_a_per_channel_model_compiles_to_the_same_program_and_ledger(name, monkeypatch):
    """The per-channel steps' epilogues are `ColumnPosts` (a fused site's columns' posts
    never made in the check) and the program, its bytes and the ledger are the ones the
    tuple form gives."""
    model = SMALL / name
    fast = compile_model(model, "bitwise", FLOAT)
    per_channel = [
        s for s in fast.lowered.steps if isinstance(getattr(s, "post", None), ColumnPosts)
    ]
    assert per_channel, "no per-channel fused step"
    filled = [g for s in fast.sites for g in (s.post or ()) if isinstance(g, FilledGroup)]
    made = [g for g in filled if "post" in g.__dict__]
    assert bool(filled) == bool(fast.sites)
    assert len(made) <= len(fast.sites)  # one per site at most: the family's check
    import pickle

    unmade = [g for g in filled if "post" not in g.__dict__]
    assert bool(unmade) == bool(filled)
    if unmade:  # a group whose post is not made yet pickles, and makes it after
        g = pickle.loads(pickle.dumps(unmade[0]))
        assert "post" not in g.__dict__ and g.post == unmade[0].post and g.before is not None
    monkeypatch.setattr(fuse, "_column_posts", lambda groups, n_cols: None)
    monkeypatch.setattr(lower, "requant_column_posts", lambda rq, n, scheme: None)
    slow = compile_model(model, "bitwise", FLOAT)
    assert not any(isinstance(getattr(s, "post", None), ColumnPosts) for s in slow.lowered.steps)
    assert [getattr(s, "post", None) for s in fast.lowered.steps] == [
        getattr(s, "post", None) for s in slow.lowered.steps
    ]
    pa, pb = generate(fast.lowered, FLOAT), generate(slow.lowered, FLOAT)
    assert pa.to_bytes() == pb.to_bytes()
    la, lb = (
        model_ledger(fast.lowered, FLOAT, program=pa),
        model_ledger(slow.lowered, FLOAT, program=pb),
    )
    assert [e.to_json() for e in la.fusions] == [e.to_json() for e in lb.fusions]
    assert la.total_json() == lb.total_json()
