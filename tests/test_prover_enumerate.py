"""The enumerator: memory released after each evaluation, shared subterms evaluated once with
each side keeping its own preconditions, and the same answers as a point-by-point evaluation."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from prover import enumerate as penum
from prover import terms as T
from prover.domain import NUMPY
from prover.obligation import Obligation
from prover.terms import Var, op

TABLE = tuple(int(v) for v in np.clip(np.arange(-128, 128) // 2 + 3, -128, 127))


def _epilogue(zp_after: int = 3, shift_after: int = -7) -> Obligation:
    acc = Var("acc")
    lut = {"table": TABLE, "in_type": "int8", "index_order": "offset"}
    rq = op("requant_double", acc, multiplier=1518500250, shift=-7, zp=3, out="int8")
    before = op("lut", rq, **lut)
    after_rq = op(
        "requant_double", acc, multiplier=1518500250, shift=shift_after, zp=zp_after, out="int8"
    )
    after = op("lut", after_rq, **lut)
    return Obligation("epilogue", before, after, {"acc": (-600_000, 600_000)}, "bitwise")


def test_evaluate_frees_its_memo_without_the_garbage_collector():
    """A reference cycle kept every intermediate array alive until gc ran (1.6 GB peaks)."""
    ob = _epilogue()
    xs = np.arange(-(1 << 19), 1 << 19, dtype=np.int64)
    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(10):
            T.evaluate(ob.before, NUMPY, {"acc": xs}, [])
            T.evaluate_shared((ob.before, ob.after), NUMPY, {"acc": xs})
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    finally:
        gc.enable()
    assert held < 1 << 20, f"{held} bytes still held after the evaluations"


def test_enumeration_peak_memory_is_bounded_by_the_chunk():
    ob = _epilogue(zp_after=4)  # refuted: exercises the witness search on every chunk
    tracemalloc.start()
    d = penum.decide(ob)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert d.status == "violated"
    # 1.2 M points; a chunk's arrays are CHUNK * 8 bytes each.
    assert peak < 200 * penum.CHUNK * 8, f"peak {peak / 1e6:.1f} MB"


def _pointwise(ob: Obligation):
    lo, hi = ob.ranges["acc"]
    xs = np.arange(lo, hi + 1, dtype=np.int64)
    pb: list = []
    pa: list = []
    with np.errstate(all="ignore"):
        b = np.asarray(T.evaluate(ob.before, NUMPY, {"acc": xs}, pb), dtype=np.int64)
        a = np.asarray(T.evaluate(ob.after, NUMPY, {"acc": xs}, pa), dtype=np.int64)
    ok_b = np.logical_and.reduce([np.broadcast_to(p, xs.shape) for p in pb])
    ok_a = np.logical_and.reduce([np.broadcast_to(p, xs.shape) for p in pa])
    return xs, b, a, ok_b, ok_a


def test_shared_subterm_preconditions_count_for_each_side():
    """before and after share a requantizer whose precondition fails on part of the range."""
    acc = Var("acc")
    rq = op("requant_double", acc, multiplier=1 << 30, shift=12, zp=0, out="int8")
    before = op("saturate", rq, type="int8")
    after = op("clip", rq, lo=-100, hi=100)
    ob = Obligation("other", before, after, {"acc": (-(1 << 20), 1 << 20)}, "bounded:1")
    xs, b, a, ok_b, ok_a = _pointwise(ob)
    assumed, defined, diff = penum.evaluate_block(ob, {"acc": xs}, xs.size)
    assert not ok_b.all() and ok_b.any()
    assert np.array_equal(assumed, ok_b) and np.array_equal(defined, ok_a)
    assert np.array_equal(diff[ok_b], np.abs(b - a)[ok_b])


def test_enumeration_matches_pointwise_evaluation():
    for ob in (_epilogue(), _epilogue(zp_after=4), _epilogue(shift_after=-8)):
        xs, b, a, ok_b, ok_a = _pointwise(ob)
        bad = ok_b & (~ok_a | (np.abs(b - a) > 0))
        d = penum.decide(ob)
        assert (d.status == "violated") == bool(bad.any())
        both = ok_b & ok_a
        assert d.max_diff == int(np.abs(b - a)[both].max())
        if bad.any():
            cand = xs[bad]
            want = int(cand[np.argmin(np.where(cand > 0, 2 * cand - 1, -2 * cand))])
            assert d.witness == {"acc": want}
