"""`prover.segments.pieces`: the exact piecewise data the report draws equals a point-by-point
evaluation of both sides over the whole range, and agrees with `segments.decide`."""

from __future__ import annotations

import numpy as np
import pytest

from prover import segments
from prover import terms as T
from prover.domain import NUMPY
from prover.errors import NotApplicable
from prover.obligation import Obligation
from prover.terms import Var, op


def _sigmoid_table() -> tuple[int, ...]:
    x = np.arange(-128, 128) / 16.0
    return tuple(int(v) for v in np.round(255 / (1 + np.exp(-x)) - 128))


def _epilogue(policy: str = "bitwise", lo: int = -30000, hi: int = 30000) -> Obligation:
    acc = Var("acc")
    table = _sigmoid_table()
    lut = {"table": table, "in_type": "int8", "index_order": "offset"}
    before = op("lut", op("requant_float", acc, scale=0.0123, zp=3, out="int8"), **lut)
    after = op(
        "lut", op("requant_double", acc, multiplier=1690499072, shift=-6, zp=3, out="int8"), **lut
    )
    return Obligation("epilogue", before, after, {"acc": (lo, hi)}, policy)


def _pointwise(ob: Obligation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = ob.ranges["acc"]
    xs = np.arange(lo, hi + 1, dtype=np.int64)
    b = np.asarray(T.evaluate(ob.outputs_before[0], NUMPY, {"acc": xs}), dtype=np.int64)
    a = np.asarray(T.evaluate(ob.outputs_after[0], NUMPY, {"acc": xs}), dtype=np.int64)
    return xs, b, a


def test_pieces_equal_pointwise_evaluation_everywhere():
    ob = _epilogue()
    p = segments.pieces(ob)
    xs, b, a = _pointwise(ob)
    assert p.starts[0] == xs[0] and p.ends[-1] == xs[-1]
    assert np.all(p.starts[1:] == p.ends[:-1] + 1)  # contiguous cover, no gaps
    idx = np.searchsorted(p.starts, xs, side="right") - 1
    assert np.array_equal(p.before[idx], b)
    assert np.array_equal(p.after[idx], a)
    assert p.assumed.all() and p.defined.all()
    assert 10 < p.starts.size < 1000  # pieces, not points


def test_pieces_agree_with_decide():
    ob = _epilogue()
    p = segments.pieces(ob)
    d = segments.decide(ob)
    diff = np.abs(p.before - p.after)
    m = int(diff.max())
    assert d.max_diff == m >= 1
    assert d.status == "violated"
    x = d.witness["acc"]
    i = int(np.searchsorted(p.starts, x, side="right") - 1)
    assert diff[i] >= 1
    assert segments.decide(ob.with_policy(f"bounded:{m}")).status == "holds"
    assert segments.decide(ob.with_policy(f"bounded:{m - 1}")).status == "violated"


def test_pieces_refuse_what_decide_refuses():
    acc, other = Var("acc"), Var("w")
    ob = Obligation(
        "other", op("add", acc, other), op("add", other, acc), {"acc": (0, 3), "w": (0, 3)}
    )
    with pytest.raises(NotApplicable):
        segments.pieces(ob)
