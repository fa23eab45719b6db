"""`prover.segments_many`: per-column decisions made together equal `segments.decide`'s.

Random per-column lowering and epilogue obligations (float scale against the same scale,
against a nearby scale, with clamps and saturations, with a table above them, bitwise and
bounded policies, ranges inside and across int32's ends): the batch records exactly the columns that hold, with the decision
`segments.decide` computes alone; violated columns are left to `segments.decide`, so their
counterexample is the one it finds.
"""

from __future__ import annotations

import numpy as np

from prover import segments, segments_many
from prover.inttypes import INT32_MAX, INT32_MIN, int_type
from prover.obligation import Obligation
from prover.terms import Var, op

TABLES = (
    tuple(int(v) for v in np.sort(np.random.default_rng(1).integers(-128, 128, 256))),
    tuple(int(v) for v in np.random.default_rng(2).integers(-128, 128, 256)),  # not monotone
)


def _column(rng: np.random.Generator, i: int) -> Obligation:
    out = ("int8", "uint8")[i % 2]
    t = int_type(out)
    scale = float(np.float32(10.0 ** rng.uniform(-6, -1)))
    zp = int(rng.integers(t.min, t.max + 1))
    acc = Var("acc")
    before = op("requant_float", acc, scale=scale, zp=zp, out=out)
    near = float(np.float32(scale * (1 + rng.choice([0.0, 0.0, 1e-6, 1e-3]))))
    after = op("requant_float", acc, scale=near, zp=zp, out=out)
    if i % 5 == 0:
        after = op("clip", after, lo=t.min + 1, hi=t.max)
    if i % 7 == 0:
        before = op("saturate", before, type=out)
    if i % 4 == 1:  # a table above the chain (an epilogue), one of two tables
        table = TABLES[i % 8 == 1]
        before = op("lut", op("saturate", before, type="int8"), table=table, in_type="int8",
                    index_order="offset")  # fmt: skip
        after = op("lut", op("saturate", after, type="int8"), table=table, in_type="int8",
                   index_order="offset")  # fmt: skip
    lo = int(rng.integers(-(1 << 20), 0))
    hi = int(rng.integers(0, 1 << 20))
    if i % 11 == 0:
        lo, hi = INT32_MIN, INT32_MAX
    policy = ("bitwise", "bounded:1")[i % 3 == 0]
    return Obligation("lowering", before, after, {"acc": (lo, hi)}, policy)


def _key(d) -> tuple:
    return (d.status, d.procedure, d.version, d.witness, d.minimal, d.max_diff, d.stats)


def test_batch_decisions_equal_the_ones_made_alone():
    rng = np.random.default_rng(25)
    obs = [_column(rng, i) for i in range(48)]
    segments.clear_shared_steps()
    alone = [segments.decide(o) for o in obs]
    segments.clear_shared_steps()
    segments.prefetch(obs)
    recorded = segments_many.decide_many(obs)
    holds = [o.hash for o, d in zip(obs, alone, strict=True) if d.status == "holds"]
    assert recorded == len(holds) == len(segments.DECIDED)
    assert set(segments.DECIDED) == set(holds)
    assert 0 < recorded < len(obs)  # both kinds are drawn
    got = [segments.decide(o) for o in obs]
    assert [_key(d) for d in got] == [_key(d) for d in alone]
    assert not segments.DECIDED  # each recorded decision is returned once


def test_nothing_recorded_without_prefetched_steps_or_of_another_shape():
    segments.clear_shared_steps()
    rng = np.random.default_rng(3)
    obs = [_column(rng, i) for i in range(1, 5)]
    assert segments_many.decide_many(obs) == 0  # no steps prefetched: decided alone
    acc = Var("acc")
    fixed = op("requant_double", acc, multiplier=1 << 30, shift=-3, zp=0, out="int8")
    two = op("add", op("requant_float", acc, scale=0.01, zp=0, out="int8"),
             op("requant_float", acc, scale=0.02, zp=0, out="int8"))  # fmt: skip
    other = [Obligation("epilogue", t, t, {"acc": (-100, 100)}, "bitwise") for t in (fixed, two)]
    segments.prefetch(other)
    assert segments_many.decide_many(other * 2) == 0  # not one float chain a side
    segments.clear_shared_steps()


def test_above_memo_gives_the_same_terms_shared_per_table():
    """`_above` with a batch memo: equal to the term built without it, one object for every
    column whose table op shares its parameters object, another for other parameters or
    another cut variable; deeper terms are built as before."""
    table = tuple(range(-128, 128))
    lut = op("lut", Var("x"), table=table, in_type="int8", index_order="offset")
    memo: dict = {}
    got = []
    for scale in (0.01, 0.02, 0.03):
        c = op("requant_float", Var("acc"), scale=scale, zp=0, out="int8")
        t = segments_many.T.Op("lut", (c,), lut.params)
        for k in (0, 1):
            v = Var(segments_many._CUT[k])
            a = segments_many._above(t, c, v, memo)
            assert a == segments_many._above(t, c, v) == segments_many.T.Op("lut", (v,), lut.params)
            got.append(a)
    assert got[0] is got[2] is got[4] and got[1] is got[3] is got[5] and got[0] != got[1]
    c = op("requant_float", Var("acc"), scale=0.5, zp=0, out="int8")
    other = op("lut", c, table=table[::-1], in_type="int8", index_order="offset")
    assert segments_many._above(other, c, Var("v"), memo) == op(
        "lut", Var("v"), table=table[::-1], in_type="int8", index_order="offset"
    )
    deep = op("clip", segments_many.T.Op("lut", (c,), lut.params), lo=-3, hi=3)
    assert segments_many._above(deep, c, Var("v"), memo) == op(
        "clip", segments_many.T.Op("lut", (Var("v"),), lut.params), lo=-3, hi=3
    )
