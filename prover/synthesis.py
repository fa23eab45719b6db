"""Fixed-point parameter synthesis for a fused epilogue (issue 16).

Given the reference epilogue of a column group, `before = tail(requant_float(acc))` (ONNX
Runtime's float-scale requantization followed by any per-value function of its result:
clips, tables, a quantized add), the reachable accumulator range `[lo, hi]` and the
fixed-point parameter space a target lets the compiler choose (`FixedPointSpace`), find
`(scheme, multiplier, shift, zero point, table)` such that

    table[saturate(requant_fixed(acc, multiplier, shift) + zp)] == before(acc)

for every `acc` in `[lo, hi]` (bitwise), or show that none exist and report the smallest
conflicting pair of accumulator values. Synthesis only proposes: `obligation` builds the
normal epilogue obligation whose `after` term carries the synthesised parameters, and
`prover.api.check` decides it like any other lowering.

Why the search is complete (every claim below is exact; no float and no sampling):

1. The reference is constant between the thresholds of the float staircase
   (`requant.float_requant_thresholds`). Call `c` in `(lo, hi]` a change point when
   `before(c-1) != before(c)`.
2. The NPU index `I(acc) = saturate(Q(acc) + zp)` is non-decreasing in `acc` (SRDHM,
   RDBPOT and single rounding each round a non-decreasing function; saturation is
   monotone). The table is free per index, so a table exists iff `I(c-1) != I(c)` at every
   change point `c`: necessary because one entry cannot hold two values; sufficient because
   `I(a) == I(b)`, `a < b`, makes `I` constant on `[a, b]`, so no change point lies in
   `(a, b]` and `before(a) == before(b)`, and `table[i] := before(any acc with I = i)` is
   well defined.
3. For a fixed scheme and shift, `Q(x; M)` is monotone in `M` for every fixed `x`
   (non-decreasing for `x > 0`, non-increasing for `x < 0`, constant at 0). So each set
   `{M : Q(x; M) >= k}` is an interval. Its end is `X*M >= T` solved for M (`_boundary`:
   closed form, checked on the kernel's own formula, binary search where the check
   fails). The condition at one change point is `exists k: Q(c-1) < k <= Q(c)`, a finite
   union of such intervals: with `c_1`/`c_n` the smallest/largest change point,
   a zero point in the space exists iff `Q(c_1) >= L = out.min + 1 - zp_max`,
   `Q(c_n - 1) < U = out.max - zp_min` and `Q(c_n - 1) - Q(c_1) <= out.max - out.min - 2`;
   under those, `k` ranges over `[L, U]` only (at most two type widths). For a fixed `k`
   the constraint on `M` is linear (`k * 2^(31-shift)` against `c * M` up to the rounding
   nudges), which is why it is one interval.
4. Intersecting these interval unions over all change points gives every valid
   multiplier of that shift exactly; once the set is small it is enumerated and every
   remaining change point is evaluated at every candidate. Every scheme and shift of
   the space is tried, so "impossible" covers the whole space. No solver is needed: the
   constraints are intervals on one integer.

The NPU-side preconditions are part of the space: a shift whose left shift overflows int32
somewhere in `[lo, hi]` is never proposed (double rounding); single rounding keeps
`Q(lo)` and `Q(hi)` inside int32. A clip on the NPU side never helps (it only merges
indices; the table absorbs any clip), so synthesised epilogues have none.

The conflicting pair. Change points are taken nearest zero first (`|c|`, then `c`). When
no parameters exist, `Conflict.pair = (c-1, c)` is the first change point such that no
parameter set of the space keeps all change points inside the intermediate type and
separates the change points up to and including it: the smallest prefix of that order
that is already impossible.

One table for several column groups (`prover.shared_table.synthesize_shared`: a MatMul's postprocessor holds
one table, with per-column multiplier, shift and zero point). For a GIVEN table whose
values each fill one run of indices, `fit_table` is exact: the reference is constant on
each segment between change points and the index is non-decreasing, so the epilogue is
right on a segment `[a, b]` with value `v` stored at `[s_v, e_v]` iff `I(a) >= s_v` and
`I(b) <= e_v`; for a fixed scheme, shift and zero point each bound is an interval of
multipliers (3.), so the valid ones are one interval, and every scheme, shift and zero
point is tried. A shared table is impossible whenever one group has no parameters alone
(its pair is the proof: a shared table is one particular free table). Candidate tables
(the reference's own, each group's synthesised one) are tried first with `fit_table`; when
none fits, `prover.shared_table.decide` searches every table exactly (its docstring says
why that is complete) and either finds one, proves that none exists (a minimal set of
groups, usually two, with no common table) or, when its budget runs out, answers
"not_found", which is never reported as a proof.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import requant as rq
from .domain import NUMPY, KernelError
from .inttypes import INT32_MAX, INT32_MIN, int_type
from .lut import reorder_table
from .obligation import Obligation
from .policy import Policy
from .staircase import monotone_thresholds
from .terms import Op, Term, Var, evaluate, free_vars, op
from .uniq import unique

SCHEMES = {"fixed_double": "requant_double", "fixed_single": "requant_single"}
_MID = "__requantized"
_ENUMERATE_BELOW = 4096  # candidate multipliers at which interval mode switches to enumeration
_ALL_BELOW = 1 << 16  # a valid set up to this size is returned whole
_CHUNK = 1 << 18  # (change point, multiplier) pairs `_enumerate` evaluates at once


@dataclass(frozen=True)
class FixedPointSpace:
    """The parameters a fixed-point postprocessor lets the compiler choose.

    `schemes`: requantizer roundings the hardware has ("fixed_double" gemmlowp double
    rounding, "fixed_single" TFLite single rounding); `shift_min..shift_max` (clipped to
    each scheme's range); multipliers `0..multiplier_max`; `zero_point` "free" (any value
    of the intermediate type) or "fixed" (the reference's); the table is always free.
    """

    schemes: tuple[str, ...] = ("fixed_double",)
    shift_min: int = -31
    shift_max: int = 31
    multiplier_max: int = INT32_MAX
    zero_point: str = "free"
    intermediate_type: str = "int8"
    index_order: str = "offset"

    def __post_init__(self) -> None:
        for s in self.schemes:
            if s not in SCHEMES:
                raise KernelError(f"unknown fixed-point scheme {s!r}; known: {sorted(SCHEMES)}")
        if not self.schemes:
            raise KernelError("a fixed-point space needs at least one scheme")
        if self.zero_point not in ("free", "fixed"):
            raise KernelError(f"zero_point must be 'free' or 'fixed', not {self.zero_point!r}")
        if not 0 < self.multiplier_max <= INT32_MAX:
            raise KernelError(f"multiplier_max {self.multiplier_max} outside [1, 2^31-1]")
        if int_type(self.intermediate_type).bits > 8:
            raise KernelError("the table needs an intermediate type of at most 8 bits")

    def shifts(self, scheme: str) -> range:
        """The shifts of `scheme` inside this space."""
        top = 30 if scheme == "fixed_single" else 31
        return range(max(self.shift_min, -31), min(self.shift_max, top) + 1)


@dataclass(frozen=True)
class FixedEpilogue:
    """Synthesised NPU epilogue: `table[saturate(requant(acc) + zp)]`, table in `index_order`."""

    scheme: str
    multiplier: int
    shift: int
    zp: int
    intermediate_type: str
    table: tuple[int, ...]
    index_order: str

    def term(self, acc: Term) -> Term:
        """The epilogue as a kernel term over `acc` (the obligation's `after`)."""
        mid = op(
            SCHEMES[self.scheme],
            acc,
            multiplier=self.multiplier,
            shift=self.shift,
            zp=self.zp,
            out=self.intermediate_type,
        )
        return op(
            "lut",
            mid,
            table=self.table,
            in_type=self.intermediate_type,
            index_order=self.index_order,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "scheme": self.scheme,
            "multiplier": self.multiplier,
            "shift": self.shift,
            "zp": self.zp,
            "intermediate_type": self.intermediate_type,
            "index_order": self.index_order,
            "table": list(self.table),
        }


@dataclass(frozen=True)
class Conflict:
    """Why no parameters exist: accumulators `pair` differ in the reference output.

    `prefix` change points (nearest zero first, the last being `pair`) already admit no
    parameters in the space; `prefix == 0` means the change points alone span more
    intermediate values than the type holds.
    """

    pair: tuple[int, int]
    outputs: tuple[int, int]
    prefix: int
    change_points: int

    def message(self) -> str:
        a, b = self.pair
        if self.prefix == 0:
            return (
                f"the reference changes value between acc={a} and acc={b}, more often than "
                "the intermediate type has values for any multiplier and shift"
            )
        return (
            f"no multiplier, shift and zero point separates acc={a} and acc={b} (reference "
            f"outputs {self.outputs[0]} and {self.outputs[1]}) together with the "
            f"{self.prefix - 1} change points nearer zero ({self.change_points} in all)"
        )


@dataclass(frozen=True)
class Synthesis:
    """The answer: `params` (status "found") or `conflict` (status "impossible")."""

    status: str
    params: FixedEpilogue | None
    conflict: Conflict | None
    change_points: int
    shifts_tried: int
    time_ms: float
    notes: dict[str, object] = field(default_factory=dict)

    def after(self, acc: Term) -> Term:
        """The synthesised epilogue term (raises when none exists)."""
        if self.params is None:
            why = self.conflict.message() if self.conflict is not None else "none found"
            raise KernelError("no parameters were synthesised: " + why)
        return self.params.term(acc)


# --- the reference as a step function ----------------------------------------------------


@dataclass(frozen=True)
class _Reference:
    node: Op  # the requant_float node applied to the accumulator
    tail: Term  # the rest, over Var(_MID)
    thresholds: np.ndarray  # of the float staircase, int32-wide
    values: np.ndarray  # tail at every intermediate level (offset order)
    mid_min: int

    def at(self, acc: np.ndarray) -> np.ndarray:
        """The reference output at accumulators `acc` (exact, via the staircase)."""
        level = np.searchsorted(self.thresholds, np.asarray(acc, dtype=np.int64), side="right")
        return self.values[level]


def _replace(t: Term, node: Op, by: Term) -> Term:
    if t == node:
        return by
    if isinstance(t, Op):
        return Op(t.prim, tuple(_replace(a, node, by) for a in t.args), t.params)
    return t


def _find(t: Term, var: str) -> list[Op]:
    if isinstance(t, Op):
        if t.prim == "requant_float" and t.args == (Var(var),):
            return [t]
        return [n for a in t.args for n in _find(a, var)]
    return []


def reference_of(before: Term, var: str) -> _Reference:
    """Split `before` into `tail(requant_float(var))`; raise `KernelError` if it is not."""
    nodes = set(_find(before, var))
    if len(nodes) != 1:
        raise KernelError(
            f"synthesis needs the reference to requantize {var!r} with exactly one "
            f"requant_float; found {len(nodes)}"
        )
    (node,) = nodes
    tail = _replace(before, node, Var(_MID))
    if var in free_vars(tail) or free_vars(tail) - {_MID}:
        raise KernelError(f"the reference uses {var!r} other than through its requant_float")
    p = node.kwargs
    mid = int_type(p["out"])
    thr = np.asarray(rq.float_requant_thresholds(float(p["scale"]), int(p["zp"]), mid.name))
    levels = np.arange(mid.min, mid.max + 1, dtype=np.int64)
    with np.errstate(all="ignore"):
        vals = np.broadcast_to(np.asarray(evaluate(tail, NUMPY, {_MID: levels})), levels.shape)
    return _Reference(node, tail, thr, np.asarray(vals, dtype=np.int64), mid.min)


def change_points(ref: _Reference, lo: int, hi: int) -> np.ndarray:
    """Accumulators `c` in `(lo, hi]` with `before(c-1) != before(c)`, ascending."""
    t = unique(ref.thresholds[(ref.thresholds > lo) & (ref.thresholds <= hi)])
    return t[ref.at(t - 1) != ref.at(t)]


# --- the fixed-point requantizer as a function of the multiplier -------------------------


def _q(scheme: str, shift: int, x, m) -> np.ndarray:
    """`Q(x; M)` (the requantizer before zero point and saturation), elementwise."""
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(m, dtype=np.int64)
    if scheme == "fixed_double":
        left, right = max(shift, 0), max(-shift, 0)
        return rq.rdbpot(NUMPY, rq.srdhm(NUMPY, x << left, m), right)
    total = 31 - shift  # rq.single_round with the multiplier as an array operand
    return NUMPY.shr(x * m + np.int64(1 << (total - 1)), total)


def _first_true(pred: Callable[[np.ndarray], np.ndarray], n: int, a: int, b: int) -> np.ndarray:
    """Per row, the least M in [a, b] where `pred` (monotone false->true) holds, else b+1."""
    lo = np.full(n, a, dtype=np.int64)
    hi = np.full(n, b + 1, dtype=np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = lo + (hi - lo) // 2
        up = active & pred(np.where(active, mid, a))
        hi = np.where(up, mid, hi)
        lo = np.where(active & ~up, mid + 1, lo)


_SAT = 1 << 62  # |x * M| < 2^62 for int32 x and 0 <= M < 2^31: products never reach it


def _shl_sat(v: np.ndarray, e: int) -> np.ndarray:
    """`v * 2^e` saturated at +-2^62 (exact below; past it, every product compares alike)."""
    if e >= 62:
        return np.sign(v) * np.int64(_SAT)
    cap = np.int64(_SAT >> e)
    return np.where(v >= cap, _SAT, np.where(v <= -cap, -_SAT, v << np.int64(e)))


def _product_threshold(scheme: str, shift: int, xs: np.ndarray, ks: np.ndarray):
    """`(X, T)` with `Q(x; M) >= k` iff `X * M >= T`, for every M in [0, 2^31).

    Double rounding: RoundingDivideByPOT(S, r) >= k iff S >= z = (2k-1) 2^(r-1) (+1 where
    z < 0: ties round away from zero), and SRDHM(X, M) >= z iff X*M >= (2z-1) 2^30 for
    either sign (its nudge); single rounding: X*M >= (2k-1) 2^(t-1), t = 31 - shift.
    Levels are clipped where Q cannot reach them, thresholds saturated at +-2^62.
    """
    k = np.clip(ks, -(1 << 61) - 2, (1 << 61) + 2)
    if scheme == "fixed_double":
        left, right = max(shift, 0), max(-shift, 0)
        z = k
        if right:
            z = _shl_sat(2 * k - 1, right - 1)
            z = z + (z < 0)
        z = np.clip(z, -(1 << 32), 1 << 32)  # SRDHM's result is an int32
        return xs << np.int64(left), _shl_sat(2 * z - 1, 30)
    return xs, _shl_sat(2 * k - 1, 30 - shift)


def _boundary_guess(scheme: str, shift: int, xs: np.ndarray, ks: np.ndarray, a: int, b: int):
    """Closed form of `_boundary` (least M in [a, b] with Q >= k for x > 0, Q < k for
    x <= 0, else b+1): `X*M >= T` solved for M."""
    big, t = _product_threshold(scheme, shift, xs, ks)
    safe = np.where(big == 0, 1, big)
    up = -((-t) // safe)  # x > 0: ceil(T / X)
    down = t // safe + 1  # x < 0: X*M < T iff M > T / X
    zero = np.where(t > 0, a, b + 1)  # x = 0: Q = 0 < k iff k > 0
    m = np.where(big > 0, up, np.where(big < 0, down, zero))
    return np.clip(m, a, b + 1)


def _boundary_search(scheme: str, shift: int, xs: np.ndarray, ks: np.ndarray, a: int, b: int):
    """`_boundary` by binary search on the kernel formula (the reference; the fallback)."""
    pos = xs > 0

    def flipped(m: np.ndarray) -> np.ndarray:
        q = _q(scheme, shift, xs, m)
        return np.where(pos, q >= ks, q < ks)

    return _first_true(flipped, len(xs), a, b)


def _boundary(scheme: str, shift: int, xs: np.ndarray, ks: np.ndarray, a: int, b: int):
    """Per row (x, k), the least M in [a, b] with Q(x; M) >= k (x > 0) or Q(x; M) < k
    (x <= 0), else b+1: the one place the monotone predicate turns true.

    The closed form is checked on the kernel's own formula (true at the answer, false just
    below it: with a monotone predicate that pins it down), and rows failing the check are
    searched (`_boundary_search`), so the answer is the search's exactly.
    """
    m = _boundary_guess(scheme, shift, xs, ks, a, b)
    pos, n = xs > 0, len(xs)
    q = _q(scheme, shift, np.tile(xs, 2), np.concatenate([np.minimum(m, b), np.maximum(m - 1, a)]))
    p2 = np.where(np.tile(pos, 2), q >= np.tile(ks, 2), q < np.tile(ks, 2))
    ok = ((m > b) | p2[:n]) & ((m == a) | ~p2[n:])
    if not ok.all():
        bad = np.flatnonzero(~ok)
        m[bad] = _boundary_search(scheme, shift, xs[bad], ks[bad], a, b)
    return m


def _level_sets(scheme, shift, xs, ks, a, b):
    """Per row (x, k): the half-open multiplier intervals {M in [a, b] : Q(x; M) >= k} and
    its complement {Q < k}, as (ge_start, ge_end, lt_start, lt_end) arrays.

    Q(x; M) is non-decreasing in M for x > 0 and non-increasing for x <= 0 (constant 0 at
    x = 0), so both sets are intervals split at one boundary (`_boundary`).
    """
    xs = np.asarray(xs, dtype=np.int64)
    ks = np.asarray(ks, dtype=np.int64)
    pos = xs > 0
    bnd = _boundary(scheme, shift, xs, ks, a, b)
    lo = np.full(len(xs), a, dtype=np.int64)
    hi = np.full(len(xs), b + 1, dtype=np.int64)
    ge_s, ge_e = np.where(pos, bnd, lo), np.where(pos, hi, bnd)
    lt_s, lt_e = np.where(pos, lo, bnd), np.where(pos, bnd, hi)
    return ge_s, ge_e, lt_s, lt_e


Intervals = list[tuple[int, int]]  # sorted, disjoint, half-open


def _union(s: np.ndarray, e: np.ndarray) -> Intervals:
    keep = s < e
    s, e = s[keep], e[keep]
    order = np.argsort(s, kind="stable")
    out: Intervals = []
    for a, b in zip(s[order].tolist(), e[order].tolist(), strict=True):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(x: Intervals, y: Intervals) -> Intervals:
    out: Intervals = []
    i = j = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def _size(x: Intervals) -> int:
    return sum(b - a for a, b in x)


# --- the search --------------------------------------------------------------------------


@dataclass
class _Problem:
    scheme: str
    shift: int
    lo: int
    hi: int
    points: np.ndarray  # change points, nearest zero first
    kmin: int  # L
    kmax: int  # U
    span: int  # out.max - out.min - 2
    zp_range: tuple[int, int]
    mid_min: int
    mid_max: int
    multiplier_max: int
    ideal: float


def _window(p: _Problem, cmin: int, cmax: int, n: int) -> Intervals:
    """Multipliers for which some zero point keeps every change point inside the type."""
    a, b = 0, p.multiplier_max
    # Q(cmin) >= L, Q(cmax - 1) < U; single rounding: Q(lo), Q(hi) in int32 (NPU side)
    xs, ks, want_ge = [cmin, cmax - 1], [p.kmin, p.kmax], [True, False]
    if p.scheme == "fixed_single":
        xs, ks, want_ge = (
            xs + [p.hi, p.lo],
            ks + [INT32_MAX + 1, INT32_MIN],
            want_ge + [False, True],
        )
    ge_s, ge_e, lt_s, lt_e = _level_sets(p.scheme, p.shift, xs, ks, a, b)
    g = np.asarray(want_ge)
    s, e = np.where(g, ge_s, lt_s).max(), np.where(g, ge_e, lt_e).min()
    if s >= e:
        return []
    x: Intervals = [(int(s), int(e))]
    if n >= 2:
        a, b = x[0][0], x[0][1] - 1
        levels = np.arange(p.kmin, p.kmax, dtype=np.int64)
        m = len(levels)
        rows_x = np.concatenate([np.full(m, cmin), np.full(m, cmin), np.full(m, cmax - 1)])
        rows_k = np.concatenate([levels, levels + 1, levels + p.span + 1])
        ge_s, ge_e, lt_s, lt_e = _level_sets(p.scheme, p.shift, rows_x, rows_k, a, b)
        # Q(cmin) == k and Q(cmax - 1) <= k + span
        s = np.maximum(np.maximum(ge_s[:m], lt_s[m : 2 * m]), lt_s[2 * m :])
        e = np.minimum(np.minimum(ge_e[:m], lt_e[m : 2 * m]), lt_e[2 * m :])
        x = _intersect(x, _union(s, e))
    return x


def _step(p: _Problem, c: int, x: Intervals) -> Intervals:
    """`x` restricted to multipliers with Q(c-1) < Q(c), i.e. a step at change point c."""
    a, b = x[0][0], x[-1][1] - 1
    ends = np.array([a, b], dtype=np.int64)
    q0, q1 = _q(p.scheme, p.shift, c - 1, ends), _q(p.scheme, p.shift, c, ends)
    k_lo, k_hi = max(p.kmin, int(q0.min()) + 1), min(p.kmax, int(q1.max()))
    if k_lo > k_hi:
        return []
    ks = np.arange(k_lo, k_hi + 1, dtype=np.int64)
    m = len(ks)
    rows_x = np.concatenate([np.full(m, c), np.full(m, c - 1)])
    ge_s, ge_e, lt_s, lt_e = _level_sets(p.scheme, p.shift, rows_x, np.concatenate([ks, ks]), a, b)
    s = np.maximum(ge_s[:m], lt_s[m:])
    e = np.minimum(ge_e[:m], lt_e[m:])
    return _intersect(x, _union(s, e))


def _enumerate(p: _Problem, ms: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Per candidate multiplier, the index of the first change point it fails (len = none).

    Change points are taken in growing chunks (all live candidates at once); candidates
    drop out at their first failure, so a hopeless set costs one small chunk."""
    n = len(points)
    first = np.full(len(ms), n, dtype=np.int64)
    alive = np.arange(len(ms))
    start, size = 0, 8
    while start < n and len(alive):
        size = max(1, min(size, _CHUNK // len(alive)))
        c = np.asarray(points[start : start + size], dtype=np.int64)[:, None]
        m = ms[alive][None, :]
        bad = _q(p.scheme, p.shift, c - 1, m) >= _q(p.scheme, p.shift, c, m)
        hit = bad.any(axis=0)
        first[alive[hit]] = start + bad.argmax(axis=0)[hit]
        alive = alive[~hit]
        start += size
        size *= 4
    return first


def _to_intervals(ms: np.ndarray) -> Intervals:
    """Sorted distinct multipliers as half-open intervals of consecutive values."""
    if not len(ms):
        return []
    cut = np.flatnonzero(np.diff(ms) != 1) + 1
    return [(int(p[0]), int(p[-1]) + 1) for p in np.split(ms, cut)]


def valid_multipliers(p: _Problem) -> tuple[Intervals, int]:
    """Every multiplier of `p`'s scheme and shift for which a zero point separates all
    change points, exactly (module docstring, 3.-4.), and the length of the failing prefix
    of `p.points` (`len(p.points)` when some multiplier is valid)."""
    pts = p.points
    n = len(pts)
    x = _window(p, int(pts.min()), int(pts.max()), n)
    if not x:
        return [], 0
    for j, c in enumerate(pts.tolist()):
        if _size(x) <= _ENUMERATE_BELOW:
            ms = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in x])
            first = _enumerate(p, ms, pts[j:])
            ok = ms[first == n - j]
            return _to_intervals(ok), (n if len(ok) else j + int(first.max()) + 1)
        x = _step(p, c, x)
        if not x:
            return [], j + 1
    return x, n


def _solve_shift(p: _Problem) -> tuple[np.ndarray, int]:
    """Valid multipliers of this shift (all, or each interval's ends and its point nearest
    the ideal when the set stays large) and the length of the failing prefix."""
    x, fail = valid_multipliers(p)
    if _size(x) <= _ALL_BELOW:
        ms = [np.arange(a, b, dtype=np.int64) for a, b in x]
        return (np.concatenate(ms) if ms else np.empty(0, dtype=np.int64)), fail
    # Still a large set after every change point: every multiplier in it works.
    near = [min(max(round(p.ideal), a), b - 1) for a, b in x]
    return np.array([v for (a, b), m in zip(x, near, strict=True) for v in (a, b - 1, m)]), fail


def _npu_index(params: FixedEpilogue, acc: np.ndarray) -> np.ndarray:
    mid = op(
        SCHEMES[params.scheme],
        Var("acc"),
        multiplier=params.multiplier,
        shift=params.shift,
        zp=params.zp,
        out=params.intermediate_type,
    )
    return np.asarray(evaluate(mid, NUMPY, {"acc": np.asarray(acc, dtype=np.int64)}))


def _build_table(
    ref: _Reference, lo: int, hi: int, scheme: str, m: int, shift: int, zp: int, space
) -> FixedEpilogue:
    mid = int_type(space.intermediate_type)
    draft = FixedEpilogue(scheme, m, shift, zp, mid.name, (), space.index_order)
    first = monotone_thresholds(lambda a: _npu_index(draft, a), mid.min, mid.max, lo, hi)
    starts = np.concatenate([[lo], np.maximum(first, lo)])  # first acc of each index
    levels = np.arange(mid.min, mid.max + 1, dtype=np.int64)
    reached = (starts <= hi) & (_npu_index(draft, np.minimum(starts, hi)) == levels)
    logical = np.zeros(mid.size, dtype=np.int64)
    vals = ref.at(np.minimum(starts, hi))
    last = vals[reached][0] if reached.any() else 0
    for i in range(mid.size):  # unreachable entries repeat their neighbour (never read)
        if reached[i]:
            last = vals[i]
        logical[i] = last
    physical = reorder_table(logical, mid, "offset", space.index_order)
    return FixedEpilogue(
        scheme, m, shift, zp, mid.name, tuple(int(v) for v in physical), space.index_order
    )


def _shift_order(space: FixedPointSpace, scheme: str, scale: float) -> list[int]:
    """Every shift of the space, most promising first: the rounded scale's own, then (double
    rounding) shifts >= 0, where no second rounding disturbs the thresholds, then the rest."""
    try:
        _, s0 = rq.quantize_multiplier(scale)
    except KernelError:
        s0 = 30

    def key(s: int) -> tuple[int, int, int]:
        single = scheme == "fixed_double" and s >= 0
        return (s != s0, not single, abs(s - s0) if not single else s)

    return sorted(space.shifts(scheme), key=key)


def _shift_fits(scheme: str, shift: int, lo: int, hi: int) -> bool:
    """NPU-side precondition of double rounding: acc * 2^max(shift, 0) fits int32."""
    if scheme != "fixed_double":
        return True
    left = max(shift, 0)
    return lo >= (INT32_MIN >> left) and hi <= (INT32_MAX >> left)


def synthesize(
    before: Term, var: str, lo: int, hi: int, space: FixedPointSpace | None = None
) -> Synthesis:
    """Find fixed-point parameters equal to `before` on `[lo, hi]`, or prove none exist.

    `before` is `tail(requant_float(Var(var)))` (see the module docstring); the answer's
    `params.term(Var(var))` is the proposed `after` (not yet proven: see `obligation`).
    """
    t0 = time.perf_counter()
    space = space or FixedPointSpace()
    if not INT32_MIN <= lo <= hi <= INT32_MAX:
        raise KernelError(f"accumulator range [{lo}, {hi}] is empty or not inside int32")
    ref = reference_of(before, var)
    scale = float(ref.node.kwargs["scale"])
    ref_zp = int(ref.node.kwargs["zp"])
    mid = int_type(space.intermediate_type)
    pts = change_points(ref, lo, hi)
    order = np.lexsort((pts, np.abs(pts)))
    pts = pts[order]
    if space.zero_point == "free":
        zmin, zmax = mid.min, mid.max
    elif mid.contains(ref_zp):
        zmin = zmax = ref_zp
    else:
        raise KernelError(f"reference zero point {ref_zp} does not fit {mid.name}")
    tried = 0
    best_fail: tuple[int, tuple[str, int] | None] = (-1, None)
    for scheme in space.schemes:
        for shift in _shift_order(space, scheme, scale):
            if not _shift_fits(scheme, shift, lo, hi):
                continue
            tried += 1
            if len(pts) == 0:
                m, _ = _ideal(scale, shift, space.multiplier_max)
                zp = min(max(ref_zp, zmin), zmax)
                if scheme == "fixed_single" and not _single_fits(m, shift, lo, hi):
                    continue
                return _found(ref, lo, hi, scheme, m, shift, zp, space, pts, tried, t0)
            p = _Problem(
                scheme,
                shift,
                lo,
                hi,
                pts,
                mid.min + 1 - zmax,
                mid.max - zmin,
                mid.max - mid.min - 2,
                (zmin, zmax),
                mid.min,
                mid.max,
                space.multiplier_max,
                _ideal(scale, shift, space.multiplier_max)[1],
            )
            ms, fail = _solve_shift(p)
            if len(ms):
                m = int(ms[np.argmin(np.abs(ms.astype(np.float64) - p.ideal))])
                zp = _pick_zp(p, m, ref_zp, pts)
                return _found(ref, lo, hi, scheme, m, shift, zp, space, pts, tried, t0)
            if fail > best_fail[0]:
                best_fail = (fail, (scheme, shift))
    fail = max(best_fail[0], 0)
    if fail == 0:
        a, b = int(pts.min()) - 1, int(pts.max())
    else:
        c = int(pts[fail - 1])
        a, b = c - 1, c
    outs = ref.at(np.array([a, b]))
    conflict = Conflict((a, b), (int(outs[0]), int(outs[1])), fail, len(pts))
    elapsed = (time.perf_counter() - t0) * 1000
    return Synthesis("impossible", None, conflict, len(pts), tried, elapsed)


def _ideal(scale: float, shift: int, mmax: int) -> tuple[int, float]:
    real = float(np.float32(scale)) * 2.0 ** (31 - shift)
    return int(min(max(round(real), 0), mmax)), real


def _single_fits(m: int, shift: int, lo: int, hi: int) -> bool:
    return all(
        INT32_MIN <= int(_q("fixed_single", shift, x, np.array([m]))[0]) <= INT32_MAX
        for x in (lo, hi)
    )


def _pick_zp(p: _Problem, m: int, ref_zp: int, pts: np.ndarray) -> int:
    ms = np.array([m], dtype=np.int64)
    q_first = int(_q(p.scheme, p.shift, int(pts.min()), ms)[0])
    q_last = int(_q(p.scheme, p.shift, int(pts.max()) - 1, ms)[0])
    z_lo = max(p.mid_min + 1 - q_first, p.zp_range[0])
    z_hi = min(p.mid_max - 1 - q_last, p.zp_range[1])
    if z_lo > z_hi:
        raise AssertionError(f"synthesis: no zero point for multiplier {m}, shift {p.shift}")
    return min(max(ref_zp, z_lo), z_hi)


def _found(ref, lo, hi, scheme, m, shift, zp, space, pts, tried, t0) -> Synthesis:
    params = _build_table(ref, lo, hi, scheme, m, shift, zp, space)
    # Cheap self-check at every change point and the range ends; the proof is check()'s.
    probe = unique(np.concatenate([[lo, hi], pts - 1, pts]))
    after = evaluate(params.term(Var("acc")), NUMPY, {"acc": probe})
    if not np.array_equal(np.asarray(after), ref.at(probe)):
        raise AssertionError(f"synthesis proposed {params.to_json()} which differs at a probe")
    ms = (time.perf_counter() - t0) * 1000
    return Synthesis("found", params, None, len(pts), tried, ms)


# --- one table shared by several column groups -------------------------------------------


def _logical(table: tuple[int, ...], space: FixedPointSpace) -> np.ndarray:
    mid = int_type(space.intermediate_type)
    return reorder_table(np.asarray(table), mid, space.index_order, "offset")


def _runs(logical: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per table value, its index run `(first, last)` (offset order); values whose indices
    are not one contiguous run are left out (no segment may rely on them)."""
    out: dict[int, tuple[int, int]] = {}
    vals, first = np.unique(logical, return_index=True)
    last = len(logical) - 1 - np.unique(logical[::-1], return_index=True)[1]
    counts = np.unique(logical, return_counts=True)[1]
    for v, a, b, n in zip(
        vals.tolist(), first.tolist(), last.tolist(), counts.tolist(), strict=True
    ):
        if b - a + 1 == n:
            out[int(v)] = (int(a), int(b))
    return out


def fit_table(
    before: Term, var: str, lo: int, hi: int, table: tuple[int, ...], space: FixedPointSpace
) -> FixedEpilogue | None:
    """Parameters of `space` making `table` (physical, `space.index_order`) equal `before` on
    `[lo, hi]`, or None when none exist for this table.

    Exact: `before` is constant on each segment between change points and the NPU index is
    non-decreasing, so with value `v` stored at the index run `[s_v, e_v]` the epilogue is
    right on a segment `[a, b]` iff `I(a) >= s_v` and `I(b) <= e_v`. For a fixed scheme,
    shift and zero point each such bound is one interval of multipliers (`_level_sets`),
    so the valid multipliers are the intersection of intervals: one interval. Every scheme,
    shift and zero point of the space is tried.
    """
    ref = reference_of(before, var)
    mid = int_type(space.intermediate_type)
    if len(table) != mid.size:
        raise KernelError(f"table has {len(table)} entries, {mid.name} needs {mid.size}")
    logical = _logical(table, space)
    runs = _runs(logical)
    pts = change_points(ref, lo, hi)
    starts = np.concatenate([[lo], pts]).astype(np.int64)
    ends = np.concatenate([pts - 1, [hi]]).astype(np.int64)
    vals = ref.at(starts)
    rows: list[tuple[int, int, bool]] = []  # (x, k, Q(x) >= k - zp wanted, else < k - zp)
    for a, b, v in zip(starts.tolist(), ends.tolist(), vals.tolist(), strict=True):
        if int(v) not in runs:
            return None
        s_i, e_i = runs[int(v)]
        if s_i > 0:  # I(a) >= mid.min + s_i  <=>  Q(a) >= mid.min + s_i - zp
            rows.append((a, mid.min + s_i, True))
        if e_i < mid.size - 1:  # I(b) <= mid.min + e_i  <=>  Q(b) < mid.min + e_i + 1 - zp
            rows.append((b, mid.min + e_i + 1, False))
    xs0 = np.array([r[0] for r in rows], np.int64)
    ks0 = np.array([r[1] for r in rows], np.int64)
    ge0 = np.array([r[2] for r in rows], bool)
    ref_zp = int(ref.node.kwargs["zp"])
    if space.zero_point == "free":
        zps = np.arange(mid.min, mid.max + 1, dtype=np.int64)
    elif mid.contains(ref_zp):
        zps = np.array([ref_zp], dtype=np.int64)
    else:
        return None
    scale = float(ref.node.kwargs["scale"])
    nr = len(xs0)
    for scheme in space.schemes:
        for shift in _shift_order(space, scheme, scale):
            if not _shift_fits(scheme, shift, lo, hi):
                continue
            ideal = _ideal(scale, shift, space.multiplier_max)[1]
            if nr == 0:
                m = _ideal(scale, shift, space.multiplier_max)[0]
                zs = [min(max(ref_zp, int(zps[0])), int(zps[-1]))]
                ivals = [(m, m + 1)]
            else:
                lo_m, hi_m = _fit_intervals(scheme, shift, xs0, ks0, ge0, zps, space)
                ok = np.flatnonzero(lo_m < hi_m)
                if not len(ok):
                    continue
                near = np.clip(np.round(ideal), lo_m[ok], hi_m[ok] - 1).astype(np.int64)
                order = np.argsort(np.abs(near - ideal), kind="stable")
                zs = [int(zps[ok[i]]) for i in order]
                ivals = [(int(near[i]), int(near[i]) + 1) for i in order]
            for zp, (m, _) in zip(zs, ivals, strict=True):
                if scheme == "fixed_single" and not _single_fits(m, shift, lo, hi):
                    continue
                params = FixedEpilogue(
                    scheme, m, shift, zp, mid.name, tuple(int(v) for v in table), space.index_order
                )
                probe = unique(np.concatenate([starts, ends]))
                got = evaluate(params.term(Var("acc")), NUMPY, {"acc": probe})
                if not np.array_equal(np.asarray(got), ref.at(probe)):
                    raise AssertionError(f"fit_table proposed {params.to_json()}: differs")
                return params
    return None


def _fit_intervals(scheme, shift, xs0, ks0, ge0, zps, space):
    """Per zero point, the multiplier interval `[lo, hi)` meeting every bound row
    (`Q(x) >= k - zp` where `ge`, else `Q(x) < k - zp`); empty when lo >= hi.

    Rows are applied in chunks, the outermost segments first (they fix the slope), and
    zero points drop out as soon as their interval is empty, so a hopeless shift costs
    one chunk."""
    n = len(xs0)
    order = np.argsort(-np.abs(xs0.astype(np.float64)), kind="stable")
    lo_m = np.zeros(len(zps), dtype=np.int64)
    hi_m = np.full(len(zps), space.multiplier_max + 1, dtype=np.int64)
    alive = np.arange(len(zps))
    size = 4
    start = 0
    while start < n and len(alive):
        rows = order[start : start + size]
        start += size
        size *= 4
        nz, nr = len(alive), len(rows)
        xs = np.tile(xs0[rows], nz)
        ks = np.tile(ks0[rows], nz) - np.repeat(zps[alive], nr)
        ge = np.tile(ge0[rows], nz)
        ge_s, ge_e, lt_s, lt_e = _level_sets(scheme, shift, xs, ks, 0, space.multiplier_max)
        s = np.where(ge, ge_s, lt_s).reshape(nz, nr).max(axis=1)
        e = np.where(ge, ge_e, lt_e).reshape(nz, nr).min(axis=1)
        lo_m[alive] = np.maximum(lo_m[alive], s)
        hi_m[alive] = np.minimum(hi_m[alive], e)
        alive = alive[lo_m[alive] < hi_m[alive]]
    dead = np.setdiff1d(np.arange(len(zps)), alive)
    hi_m[dead] = lo_m[dead]
    return lo_m, hi_m


def propose(
    before: Term, var: str, lo: int, hi: int, space: FixedPointSpace | None = None
) -> tuple[FixedEpilogue, Term]:
    """The synthesised parameters and the `after` term over `Var(var)` (raises if none)."""
    s = synthesize(before, var, lo, hi, space)
    if s.params is None:
        raise KernelError(s.conflict.message() if s.conflict else "no parameters found")
    return s.params, s.params.term(Var(var))


def obligation(
    before: Term,
    var: str,
    lo: int,
    hi: int,
    params: FixedEpilogue,
    policy: Policy | str = "bitwise",
    **kw,
) -> Obligation:
    """The epilogue obligation of a synthesised lowering (its hash covers every parameter)."""
    pol = Policy.parse(policy) if isinstance(policy, str) else policy
    return Obligation(
        "epilogue", before, params.term(Var(var)), {var: (lo, hi)}, pol, note="synthesised", **kw
    )


def rounded_multiplier(scale: float) -> tuple[int, int]:
    """TFLite's rounding of `scale` (what targets do without synthesis), for comparison."""
    return rq.quantize_multiplier(float(np.float32(scale)))


__all__ = [
    "Conflict",
    "FixedEpilogue",
    "FixedPointSpace",
    "Synthesis",
    "change_points",
    "fit_table",
    "obligation",
    "propose",
    "reference_of",
    "rounded_multiplier",
    "synthesize",
]
