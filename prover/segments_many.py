"""`segments` decisions of many per-channel columns at once, vectorised across them.

A per-channel op has one obligation per output column: `clamps(requant_float(acc))`
against the target's form of it, over that column's accumulator range, each with its own
float scale. `segments.decide` handles them one at a time (about 0.3 ms each: a few dozen
small numpy calls); for thousands of columns that is seconds. Here every column of a
batch is decided in a handful of numpy calls over all of them together, by exactly the
procedure `segments.decide` runs on each:

- the segment starts of a column are its range's start and every step of either side's
  chain inside the range, the steps being the prefetched ones (`segments.prefetch`, the
  same arrays `segments._thresholds` reads);
- both sides are evaluated at those starts with the kernel's own float32 requantization
  (`requant.requant_float_concrete`, per-column scale and zero point) and the composed
  clamp (`segments._float_then_clamps`); every precondition holds there (the requantizer's
  input is in int32, the clamps are total);
- the largest difference per column, and whether any exceeds the policy's bound.

Only columns that hold are recorded (`segments.DECIDED`, returned once by
`segments.decide`, so the verdict, procedure, version, largest difference and segment
statistics are those `segments.decide` computes; `time_ms` is the batch's time shared out).
A column that is violated, of another shape, or whose steps were not prefetched is left
alone and decided on its own as before, so a counterexample is always the one
`segments.decide` finds. Verdicts do not depend on this module.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from . import requant as rq
from . import segments as seg
from . import terms as T
from .bounds import fits
from .decision import HOLDS, Decision
from .domain import KernelError
from .inttypes import INT32_MAX, INT32_MIN, int_type
from .obligation import Obligation
from .primitives import primitive

_MASK = (1 << 33) - 1  # (column, value) packed in one int64: column << 33 | value - INT32_MIN


def _side(t: T.Term, var: str) -> tuple[np.ndarray, float, int, str, int, int] | None:
    """(prefetched steps, scale, zp, out type, clamp lo, clamp hi) of a side
    `clamps(requant_float(var))` whose steps are prefetched, else None."""
    if not seg._is_chain(t):
        return None
    found = seg._float_then_clamps(t)
    if found is None:
        return None
    r, lo_c, hi_c = found
    if any(primitive(o.prim).precondition is not None for o in seg._chain_ops(t)[1:]):
        return None
    pre = seg._PREFETCHED.get((t, var))
    if pre is None or pre[0] != INT32_MIN or pre[1] != INT32_MAX:
        return None
    scale, zp, out = r.kwargs["scale"], int(r.kwargs["zp"]), str(r.kwargs["out"])
    try:
        rq._check_scale(scale)
        rq._check_zp(zp, int_type(out))
    except KernelError:
        return None  # deciding it raises the kernel's error, as before
    return pre[2], float(scale), zp, out, lo_c, hi_c


def decide_many(obligations: Sequence[Obligation]) -> int:
    """Decide the per-column float-requantizer obligations of `obligations` together; keep
    the ones that hold for `segments.decide`. Returns how many were recorded."""
    t0 = time.perf_counter()
    rows: list[tuple] = []
    for ob in obligations:
        if len(ob.variables) != 1 or len(ob.outputs_before) != 1 or len(ob.outputs_after) != 1:
            continue
        var = ob.variables[0]
        a_lo, a_hi = ob.ranges[var]
        if not INT32_MIN <= a_lo <= a_hi <= INT32_MAX:
            continue
        b, a = ob.outputs_before[0], ob.outputs_after[0]
        sb, sa = _side(b, var), _side(a, var)
        if sb is None or sa is None or not fits(ob):
            continue
        rows.append((ob, int(a_lo), int(a_hi), sb, sa, 1 if b == a else 2))
    if len(rows) < 2:
        return 0
    n = len(rows)
    lo = np.array([r[1] for r in rows], dtype=np.int64)
    hi = np.array([r[2] for r in rows], dtype=np.int64)
    parts: list[np.ndarray] = [lo]
    ids: list[np.ndarray] = [np.arange(n, dtype=np.int64)]
    for k in (3, 4):
        steps: list[np.ndarray] = [r[k][0] for r in rows]
        parts += steps
        ids += [np.full(s.size, i, dtype=np.int64) for i, s in enumerate(steps)]
    vals, col = np.concatenate(parts), np.concatenate(ids)
    inside = (vals >= lo[col]) & (vals <= hi[col])  # lo itself is in the first part
    key = np.sort((col[inside] << 33) | (vals[inside] - INT32_MIN))
    key = key[np.r_[True, key[1:] != key[:-1]]]  # np.unique's result, without its hashing
    col, starts = key >> 33, (key & _MASK) + INT32_MIN
    out = [_evaluate([r[k] for r in rows], col, starts) for k in (3, 4)]
    diff = np.abs(out[0] - out[1])
    first = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    count = np.diff(np.r_[first, col.size])
    most = np.maximum.reduceat(diff, first)
    bound = np.array([r[0].policy.bound for r in rows], dtype=np.int64)
    holds = most <= bound
    ms = (time.perf_counter() - t0) * 1000 / n
    ver = f"numpy {np.__version__}"
    if len(seg.DECIDED) + n > seg.PREFETCH_LIMIT:
        seg.DECIDED.clear()
    done = 0
    for i in np.flatnonzero(holds).tolist():
        ob = rows[i][0]
        stats = {"segments": int(count[i]), "cuts": rows[i][5]}
        seg.DECIDED[ob.hash] = Decision(
            HOLDS, "segments", ver, max_diff=int(most[i]), time_ms=ms, stats=stats
        )
        done += 1
    return done


def _evaluate(sides: list, col: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each start's side (`_side` tuples, one per column) evaluated at it."""
    scale = np.array([s[1] for s in sides], dtype=np.float32)[col]
    zp = np.array([s[2] for s in sides], dtype=np.int64)[col]
    lo_c = np.array([s[4] for s in sides], dtype=np.int64)[col]
    hi_c = np.array([s[5] for s in sides], dtype=np.int64)[col]
    index: dict[str, int] = {}
    kind = np.array([index.setdefault(s[3], len(index)) for s in sides], dtype=np.int64)[col]
    res = np.empty(starts.size, dtype=np.int64)
    for name, k in index.items():
        m = kind == k
        with np.errstate(all="ignore"):
            res[m] = rq.requant_float_concrete(starts[m], scale[m], zp[m], int_type(name))
    return np.minimum(np.maximum(res, lo_c), hi_c)
