"""Per-channel epilogue records: stripping tables keeps every other field, one table per
epilogue, and the simulator's group check of float32 requantizers is each one's check."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from npu_backend.isa import strip_tables, table_of, with_table
from npu_backend.postprocess import AddParams, PostProcess, RequantParams, apply_columns
from npu_backend.target import load_target
from prover.domain import KernelError
from tests.test_backend_support import N, fused_post

FLOAT = load_target()


def _full_post() -> PostProcess:
    """A postprocessing with every optional stage set (add, clip, table, output encoding)."""
    p = fused_post(FLOAT, clip=(-100, 90))
    add = AddParams(
        type="int8", x_scale=0.02, x_zp=1, const=5, const_scale=0.03, const_zp=0,
        c_scale=0.025, c_zp=-2,
    )  # fmt: skip
    return dataclasses.replace(p, add=add, out_type="int8", out_zp=-3)


def test_with_table_changes_the_table_and_nothing_else():
    p = _full_post()
    cols = tuple(
        dataclasses.replace(p, requant=dataclasses.replace(p.requant, scale=0.001 * (j + 1)))
        for j in range(5)
    )
    hash(cols[2])  # a hashed column: its copy computes its own hash
    got = with_table(cols, None)
    for q, g in zip(cols, got, strict=True):
        want = dataclasses.replace(q, lut=dataclasses.replace(q.lut, table=None))
        assert g == want and hash(g) == hash(want) and repr(g) == repr(want)
    assert len({id(g.lut) for g in got}) == 1  # the columns share one stripped table
    assert strip_tables(cols) == got
    assert table_of(cols) == p.lut.table


def test_table_of_refuses_two_tables():
    p = _full_post()
    other = dataclasses.replace(p.lut, table=tuple(reversed(p.lut.table)))
    with pytest.raises(ValueError, match="one table"):
        table_of((p, dataclasses.replace(p, lut=other)))
    assert table_of((p.without_lut(),)) is None


def _float_cols(scales, zps) -> tuple[PostProcess, ...]:
    return tuple(
        PostProcess(RequantParams("float32", int(z), "int8", scale=float(s)))
        for s, z in zip(scales, zps, strict=True)
    )


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 1e39 in float32
def test_a_float_group_with_one_bad_requantizer_raises_its_own_error():
    acc = np.arange(-40, 40).reshape(10, 8)
    good = _float_cols([0.01 * (j + 1) for j in range(8)], range(-4, 4))
    want = np.stack([p.apply(acc[:, j]) for j, p in enumerate(good)], axis=-1)
    np.testing.assert_array_equal(apply_columns(good, acc), want)
    for bad, msg in ((dataclasses.replace(good[3].requant, zp=200), "zero point 200"),
                     (dataclasses.replace(good[3].requant, scale=-1.0), "scale -1.0"),
                     (dataclasses.replace(good[3].requant, scale=1e39), "finite")):  # fmt: skip
        cols = (*good[:3], PostProcess(bad), *good[4:])
        with pytest.raises(KernelError, match=msg):
            apply_columns(cols, acc)


def test_an_epilogue_shared_by_two_steps_is_reported_under_each_name(monkeypatch):
    """Validation answers for one epilogue are kept by its identity and the step's name:
    a second step with the same columns reports the same issues under its own name."""
    import npu_backend.validate as V
    from tests.test_backend_validate import _step

    p = fused_post(FLOAT)
    bad = dataclasses.replace(p, requant=dataclasses.replace(p.requant, scale=-1.0))
    a = _step((p, bad) + (p,) * (N - 2))
    calls: list = []
    real = V._requant_issues
    monkeypatch.setattr(V, "_requant_issues", lambda *args: calls.append(args) or real(*args))
    first = V.validate_step(a, FLOAT)
    again = V.validate_step(dataclasses.replace(a), FLOAT)  # another step, same epilogue
    second = V.validate_step(dataclasses.replace(a, name="other"), FLOAT)
    assert [i.step for i in first] == [a.name] and [i.step for i in second] == ["other"]
    assert again == first and [i.message for i in second] == [i.message for i in first]
    assert len(calls) == 4  # two distinct columns, once for each name


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 1e39 in float32
def test_float32_requants_valid_is_every_ones_check():
    """The at-once test accepts a list exactly when every requantizer's own `check()`
    passes: zero points at and past the type's ends, scales that float32 rounds to 0 or
    infinity, no scale, another scheme, mixed output types."""
    from npu_backend.postprocess import float32_requants_valid

    ok = RequantParams("float32", 3, "int8", scale=0.02)
    cases = [
        dataclasses.replace(ok, zp=127),
        dataclasses.replace(ok, zp=128),
        dataclasses.replace(ok, zp=-129),
        dataclasses.replace(ok, scale=1e-50),
        dataclasses.replace(ok, scale=1e39),
        dataclasses.replace(ok, scale=float("nan")),
        dataclasses.replace(ok, scale=0.0),
        dataclasses.replace(ok, scale=None),
        RequantParams("float32", 200, "uint8", scale=0.5),
        RequantParams("fixed_double", 0, "int8", multiplier=1 << 30, shift=3),
    ]

    def each(rqs):
        try:
            for r in rqs:
                r.check()
        except KernelError:
            return False
        return all(r.scheme == "float32" for r in rqs) and len({r.out_type for r in rqs}) <= 1

    for bad in cases:
        rqs = [ok, bad, ok]
        assert float32_requants_valid(rqs) == each(rqs), bad
    assert float32_requants_valid([ok] * 5) and float32_requants_valid([])


def test_valid_per_channel_columns_are_checked_at_once(monkeypatch):
    """Valid float32 columns on a float32 unit: no column's requantization is checked
    alone, and the step has no issue."""
    import npu_backend.validate as V
    from tests.test_backend_validate import _step

    p = fused_post(FLOAT)
    cols = tuple(
        dataclasses.replace(p, requant=dataclasses.replace(p.requant, scale=0.001 * (j + 1)))
        for j in range(N)
    )
    calls: list = []
    real = V._requant_issues
    monkeypatch.setattr(V, "_requant_issues", lambda *a: calls.append(a) or real(*a))
    assert V.validate_step(_step(cols), FLOAT) == [] and calls == []


def test_an_add_stage_table_is_computed_once_per_distinct_stage(monkeypatch):
    """A per-channel site asks for each column's add-stage table several times (its
    obligations, validation, program): equal stages share one computation, whose result is
    the stage's own float32 QLinearAdd table; a stage differing in any field is its own."""
    import npu_backend.postprocess as pp

    pp._add_table.cache_clear()
    made: list = []
    real = AddParams._compute_table

    def counted(self):
        made.append(self)
        return real(self)

    monkeypatch.setattr(AddParams, "_compute_table", counted)
    add = _full_post().add
    assert add is not None
    twin = dataclasses.replace(add)  # equal, another object
    other = dataclasses.replace(add, c_zp=add.c_zp + 1)
    assert add.table() == twin.table() == real(add)
    assert len(made) == 1
    assert other.table() == real(other) != add.table()
    assert len(made) == 2
    no_fma = dataclasses.replace(add, fma=False)
    assert no_fma.table() == real(no_fma) and len(made) == 3


def test_a_posts_copy_with_a_field_changed_is_the_replaced_post():
    """`PostProcess.copy_with` (a per-channel op's thousands of columns) is
    `dataclasses.replace` without the constructor: equal, the same hash and repr, the
    original untouched; an unknown field is refused."""
    p = _full_post()
    hash(p)  # a hashed post: its copy computes its own hash
    rq = dataclasses.replace(p.requant, scale=0.125)
    got, want = p.copy_with(requant=rq), dataclasses.replace(p, requant=rq)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    assert p.requant.scale != 0.125 and got.requant is rq
    # the hashed original's kept hash is not copied (the copy's fields differ)
    assert set(p.copy_with(requant=rq).__dict__) == {
        f.name for f in dataclasses.fields(PostProcess)
    }
    with pytest.raises(TypeError, match="no field 'scale'"):
        p.copy_with(scale=0.5)
    # the copy is made without the constructor: right only while it checks nothing
    assert not hasattr(PostProcess, "__post_init__")


def test_posts_and_requantizers_made_at_once_are_the_replaced_ones():
    """`PostProcess.with_requants` and `RequantParams.with_scales` (a per-channel op's
    columns, made without the constructor) give what `dataclasses.replace` gives, one by
    one: equal, the same hash, repr and fields; the originals untouched."""
    p = _full_post()
    hash(p)
    rqs = p.requant.with_scales([0.125, 0.5, 0.125])
    assert rqs == [dataclasses.replace(p.requant, scale=s) for s in (0.125, 0.5, 0.125)]
    for got, s in zip(rqs, (0.125, 0.5, 0.125), strict=True):
        want = dataclasses.replace(p.requant, scale=s)
        assert hash(got) == hash(want) and repr(got) == repr(want)
        assert got.__dict__ == want.__dict__
    posts = p.with_requants(rqs)
    for got, rq in zip(posts, rqs, strict=True):
        want = dataclasses.replace(p, requant=rq)
        assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
        assert got.requant is rq and set(got.__dict__) == set(want.__dict__)
    assert posts[0] == posts[2] != posts[1] and posts[0] is not posts[2]
    assert p.requant.scale not in (0.125, 0.5)
    # made without the constructor: right only while neither class checks anything there
    assert not hasattr(RequantParams, "__post_init__")


def test_an_epilogues_validation_is_kept_for_the_same_posts_in_another_tuple(monkeypatch):
    """A check validates a fused step in legality and again once lowered, each with its own
    tuple of the same posts: the second is answered from the first. Another post object
    (even an equal one), another order or another step name is validated again."""
    import npu_backend.validate as v
    from npu_backend.lowered import NpuMatMul

    made: list[str] = []
    real = v._stage_issues

    def counted(p, step, *a, **k):
        made.append(step.name)
        return real(p, step, *a, **k)

    monkeypatch.setattr(v, "_stage_issues", counted)
    p = dataclasses.replace(_full_post(), clip=(5, -5))  # an issue to name the step by
    cols = p.requant.with_scales([0.01 * (j + 1) for j in range(6)])
    posts = p.with_requants(cols)

    def step(post, name="mm"):
        return NpuMatMul(name=name, a="x", w="w", out="y", a_zp=0, w_zp=0, bias=None,
                         a_type="int8", w_type="int8", post=post, onnx_nodes=("n",))  # fmt: skip

    caps = FLOAT.compute("MatMul")
    assert caps is not None
    first = v._posts_issues(step(tuple(posts)), caps, FLOAT, "MatMul")
    assert made == ["mm"]  # the columns share every stage: one stage check
    assert first and all(i.step == "mm" for i in first)
    again = v._posts_issues(step(tuple(posts)), caps, FLOAT, "MatMul")
    assert again == first and made == ["mm"]
    # negative: an equal post that is another object, another order, another name
    twin = list(posts)
    twin[3] = dataclasses.replace(posts[3])
    v._posts_issues(step(tuple(twin)), caps, FLOAT, "MatMul")
    v._posts_issues(step(tuple(reversed(posts))), caps, FLOAT, "MatMul")
    named = v._posts_issues(step(tuple(posts), "other"), caps, FLOAT, "MatMul")
    assert made == ["mm", "mm", "mm", "other"]
    assert [i.step for i in named] == ["other"] * len(first)


def test_a_posts_lut_replaced_or_dropped_and_the_largest_column_record():
    """`with_lut` and `without_lut` (the constructor called positionally) are the replaced
    posts; `column_record_nbytes` is the largest column's record, 28 bytes only where some
    column has an add stage."""
    from npu_backend.postprocess import column_record_nbytes, record_nbytes

    p = _full_post()
    assert p.lut is not None
    other = dataclasses.replace(p.lut, table=None)
    assert p.with_lut(other) == dataclasses.replace(p, lut=other)
    assert p.without_lut() == PostProcess(requant=p.requant, clip=p.clip, add=p.add)
    plain = dataclasses.replace(p, add=None)
    for posts in ([plain], [p], [plain, plain, p], [plain] * 3):
        assert column_record_nbytes(posts) == max(record_nbytes(q) for q in posts)
    assert column_record_nbytes([plain]) == 16 and column_record_nbytes([plain, p]) == 28


def test_a_requantizers_kept_hash_is_its_fields_and_is_not_copied():
    """`RequantParams` keeps its hash (a per-channel op's records hash thousands of posts
    sharing them): the hash of its fields, equal for equal requantizers, and neither a
    replaced copy, a copy made at once nor a pickled one carries it over."""
    import pickle

    rq = RequantParams("float32", 1, "int8", 0.5)
    assert hash(rq) == hash(("float32", 1, "int8", 0.5, None, None))
    assert hash(rq) == hash(RequantParams("float32", 1, "int8", 0.5))
    hashed = dataclasses.replace(rq, scale=0.25)
    hash(hashed)
    assert "_hash" in vars(hashed)
    for copy in (
        dataclasses.replace(hashed),
        hashed.with_scales([0.25])[0],
        pickle.loads(pickle.dumps(hashed)),
    ):
        assert "_hash" not in vars(copy)
        assert hash(copy) == hash(("float32", 1, "int8", 0.25, None, None)) != hash(rq)
    fixed = RequantParams("fixed_double", 0, "int8", multiplier=1 << 30, shift=-3)
    assert hash(fixed) == hash(("fixed_double", 0, "int8", None, 1 << 30, -3))
