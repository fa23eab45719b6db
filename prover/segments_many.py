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
from .domain import NUMPY, KernelError
from .inttypes import INT32_MAX, INT32_MIN, int_type
from .obligation import Obligation
from .primitives import primitive

_MASK = (1 << 33) - 1  # (column, value) packed in one int64: column << 33 | value - INT32_MIN


_CUT = ("__cut_before", "__cut_after")  # the chain's value, in the part of a side above it


def _above(t: T.Term, cut: T.Term, v: T.Var, memo: dict | None = None) -> T.Term:
    """`t` with every occurrence of `cut` replaced by `v`.

    `memo` (one per batch): a `t` that is one op directly over `cut` (a table over the
    chain) gives one term object for every column whose op has the same name and the same
    parameters object (per-channel columns share their table's), so the batch's grouping
    by these terms hashes and compares each once."""
    if memo is not None and isinstance(t, T.Op) and len(t.args) == 1 and t.args[0] is cut:
        key = (t.prim, id(t.params), v.name)
        hit = memo.get(key)
        if hit is not None and hit[0] is t.params:
            return hit[1]
        out = T.Op(t.prim, (v,), t.params)
        memo[key] = (t.params, out)
        return out
    if t == cut:
        return v
    if isinstance(t, T.Op):
        return T.Op(t.prim, tuple(_above(a, cut, v) for a in t.args), t.params)
    return t


def _side(t: T.Term, var: str, k: int, memo: dict | None = None) -> tuple | None:
    """(prefetched steps, scale, zp, out type, clamp lo, clamp hi, the side above its chain)
    of a side whose one cut is `clamps(requant_float(var))` with prefetched steps, else None."""
    cs = seg.cuts(t)
    if len(cs) != 1:
        return None
    (c,) = cs
    if not isinstance(c, T.Op):
        return None
    found = seg._float_then_clamps(c)
    if found is None:
        return None
    r, lo_c, hi_c = found
    if any(primitive(o.prim).precondition is not None for o in seg._chain_ops(c)[1:]):
        return None
    pre = seg._PREFETCHED.get((c, var))
    if pre is None or pre[0] != INT32_MIN or pre[1] != INT32_MAX:
        return None
    scale, zp, out = r.kwargs["scale"], int(r.kwargs["zp"]), str(r.kwargs["out"])
    try:
        rq._check_scale(scale)
        rq._check_zp(zp, int_type(out))
    except KernelError:
        return None  # deciding it raises the kernel's error, as before
    above = _above(t, c, T.Var(_CUT[k]), memo)
    return pre[2], float(scale), zp, out, lo_c, hi_c, above, c


def decide_many(obligations: Sequence[Obligation]) -> int:
    """Decide the per-column float-requantizer obligations of `obligations` together; keep
    the ones that hold for `segments.decide`. Returns how many were recorded."""
    t0 = time.perf_counter()
    rows: list[tuple] = []
    memo: dict = {}  # `_above`'s, for this batch (its entries keep their params alive)
    for ob in obligations:
        if len(ob.variables) != 1 or len(ob.outputs_before) != 1 or len(ob.outputs_after) != 1:
            continue
        var = ob.variables[0]
        a_lo, a_hi = ob.ranges[var]
        if not INT32_MIN <= a_lo <= a_hi <= INT32_MAX or _CUT[0] in var or _CUT[1] in var:
            continue
        sb = _side(ob.outputs_before[0], var, 0, memo)
        sa = _side(ob.outputs_after[0], var, 1, memo) if sb is not None else None
        if sb is None or sa is None or not fits(ob):
            continue
        rows.append((ob, int(a_lo), int(a_hi), sb, sa, 1 if sb[7] == sa[7] else 2))
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
    cut_b, cut_a = (_chain_values([r[k] for r in rows], col, starts) for k in (3, 4))
    diff, assumed, defined = _above_values(rows, col, cut_b, cut_a)
    first = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    count = np.diff(np.r_[first, col.size])
    ok = assumed & defined
    most = np.maximum.reduceat(np.where(ok, diff, -1), first)  # -1: no point where both hold
    bound = np.array([r[0].policy.bound for r in rows], dtype=np.int64)
    bad = np.add.reduceat((assumed & (~defined | (diff > bound[col]))).astype(np.int64), first)
    valid = np.add.reduceat(assumed.astype(np.int64), first)
    holds = (bad == 0) & (valid > 0)  # no valid point: vacuous, raised by segments.decide
    ms = (time.perf_counter() - t0) * 1000 / n
    ver = f"numpy {np.__version__}"
    if len(seg.DECIDED) + n > seg.PREFETCH_LIMIT:
        seg.DECIDED.clear()
    done = 0
    for i in np.flatnonzero(holds).tolist():
        ob = rows[i][0]
        stats = {"segments": int(count[i]), "cuts": rows[i][5]}
        seg.DECIDED[ob.hash] = Decision(
            HOLDS, "segments", ver, max_diff=max(int(most[i]), 0), time_ms=ms, stats=stats
        )
        done += 1
    return done


def _chain_values(sides: list, col: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each start's chain (`_side` tuples, one per column) evaluated at it."""
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


def _above_values(
    rows: list, col: np.ndarray, cut_b: np.ndarray, cut_a: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(|before - after|, reference preconditions hold, implementation's hold) at every
    start: the parts above the chains, evaluated once per distinct pair of them on the
    chains' values of every column sharing it (as `enumerate._block` evaluates whole sides)."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r[3][6], r[4][6]), []).append(i)
    diff = np.empty(col.size, dtype=np.int64)
    assumed = np.ones(col.size, dtype=bool)
    defined = np.ones(col.size, dtype=bool)
    member = np.empty(len(rows), dtype=np.int64)
    for g, (above_b, above_a) in enumerate(groups):
        member[groups[(above_b, above_a)]] = g
    which = member[col]
    for g, (above_b, above_a) in enumerate(groups):
        m = np.flatnonzero(which == g)
        env = {_CUT[0]: cut_b[m], _CUT[1]: cut_a[m]}
        with np.errstate(all="ignore"):
            (b, a), (pre_b, pre_a) = T.evaluate_shared((above_b, above_a), NUMPY, env)
        d = np.abs(np.asarray(b, dtype=np.int64) - np.asarray(a, dtype=np.int64))
        diff[m] = np.broadcast_to(d, (m.size,))
        for p in pre_b:
            assumed[m] &= np.broadcast_to(np.asarray(p, dtype=bool), (m.size,))
        for p in pre_a:
            defined[m] &= np.broadcast_to(np.asarray(p, dtype=bool), (m.size,))
    return diff, assumed, defined
