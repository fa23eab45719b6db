"""Exact fast decision for one-variable terms built on monotone staircases.

Monotonicity lemma (the soundness argument). Each of these primitives is
non-decreasing in its (single) term argument, for every parameter the kernel
accepts:

- `add_const`; `mul_const` with c >= 0; `floordiv_const` (c > 0);
- `clip`, `saturate` (clamping);
- `requant_double` (multiplier in [0, 2^31-1] is checked by the kernel):
  x -> x*2^left is increasing; SRDHM(a, M) with M >= 0 is a*M/2^31 rounded half
  away from zero (the INT32_MIN*INT32_MIN case cannot occur with M >= 0);
  RDBPOT rounds half away from zero; + zp and saturation are monotone;
- `requant_single` (M >= 0): (x*M + 2^(k-1)) >> k is a floor of an increasing map;
- `requant_float` (scale > 0): float32 conversion, multiplication by a positive
  float32 and round-half-even are each monotone (see `requant.py`).

`tests/test_prover_segments.py` proves `a < b /\\ r(a) > r(b)` unsat by SMT for
concrete parameter sets of each, and cross-checks verdicts against Bitwuzla
and enumeration.

So a chain `m` of these applied to the variable is a staircase on [lo, hi],
exactly described by its thresholds: each computed in closed form
(`stepinverse`) and accepted only where the concrete evaluation confirms it,
`f(t-1) < q <= f(t)`, else searched (`staircase.first_at_least`), provided no intermediate leaves the int64 range the
numpy evaluation computes in (checked by interval propagation below, which
also keeps every requantizer input inside int32). Split the term into maximal
such chains ("cuts"); everything above them sees the variable only through
the cuts. Between consecutive thresholds of all cuts of both sides, every cut
is constant, hence so are `before` and `after`: evaluating both once per
segment gives the exact verdict, the exact largest difference and the
violating point nearest to zero. A cut whose staircase over int32 is known is
not evaluated again there: on its valid interval its value is its value at the
interval's start plus the number of its steps at or below the point, each step
having been checked as the least point reaching its level (`_cut_values`).

Preconditions: those of primitives above the cuts are functions of the cuts,
so constant per segment and evaluated per segment. Those inside a chain
(`requant_double`: x*2^left fits int32; `requant_single`: input and result fit
int32; `requant_float`: input fits int32) bound the input of their primitive to
an interval; that input is a monotone function of the variable wherever the
chain below it is defined, so each holds exactly on an interval of the
variable, whose ends are found by binary search and become segment bounds
(`valid_interval`; the same closed form and check). A chain's steps over all of
int32 are cached (`_shared_steps`), so columns sharing a requantizer but not a range
share them. Thresholds are computed inside that interval only (outside
it the concrete values are undefined and need not be monotone). So on every
segment each precondition is constant too, and evaluating one point per
segment decides it with the sides' rule (`primitives`): a failing reference
precondition excludes the segment, a failing implementation precondition
makes it a violation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import requant as rq
from . import terms as T
from .bounds import fits
from .counterexample import rank_array
from .decision import HOLDS, VIOLATED, Decision
from .domain import NUMPY, KernelError
from .enumerate import _all_true, evaluate_block, largest_diff, violations
from .errors import NotApplicable, VacuousObligation
from .inttypes import INT32_MAX, INT32_MIN, int_type
from .obligation import Obligation
from .primitives import primitive
from .requant import single_round
from .staircase import fast_clip, first_at_least, monotone_thresholds
from .stepinverse import chain_guess, inv_float_scale
from .stepinverse import inv_single_round as _inv_single_round
from .uniq import unique

LEVEL_LIMIT = 1 << 20  # most distinct values one cut may take on [lo, hi]
SAFE = 1 << 62

Interval = tuple[int, int]


def _clamp_iv(iv: Interval, lo: int, hi: int) -> Interval:
    return min(max(iv[0], lo), hi), min(max(iv[1], lo), hi)


def _requant_iv(iv: Interval, p: dict) -> Interval:
    if iv[0] < INT32_MIN or iv[1] > INT32_MAX:
        raise NotApplicable("requantizer input may leave int32")
    t = int_type(p["out"])
    return t.min, t.max


def _mul_iv(iv: Interval, p: dict) -> Interval:
    c = int(p["c"])
    if c < 0:
        raise NotApplicable("mul_const by a negative constant is decreasing")
    return iv[0] * c, iv[1] * c


# Interval transfer of every monotone primitive; raises NotApplicable when the lemma's
# side conditions fail.
MONOTONE: dict[str, Callable[[Interval, dict], Interval]] = {
    "add_const": lambda iv, p: (iv[0] + int(p["c"]), iv[1] + int(p["c"])),
    "mul_const": _mul_iv,
    "floordiv_const": lambda iv, p: (iv[0] // int(p["c"]), iv[1] // int(p["c"])),
    "clip": lambda iv, p: _clamp_iv(iv, int(p["lo"]), int(p["hi"])),
    "saturate": lambda iv, p: _clamp_iv(iv, int_type(p["type"]).min, int_type(p["type"]).max),
    "requant_double": _requant_iv,
    "requant_single": _requant_iv,
    "requant_float": _requant_iv,
}


def _is_chain(t: T.Term) -> bool:
    while isinstance(t, T.Op):
        if t.prim not in MONOTONE or len(t.args) != 1:
            return False
        t = t.args[0]
    return isinstance(t, T.Var)


def cuts(t: T.Term, out: set | None = None) -> set:
    """Maximal monotone chains of `t` (every occurrence of the variable lies in one)."""
    out = set() if out is None else out
    if _is_chain(t):
        out.add(t)
    elif isinstance(t, T.Op):
        for a in t.args:
            cuts(a, out)
    return out


def _chain_interval(t: T.Term, iv: Interval) -> Interval:
    if isinstance(t, T.Var):
        return iv
    if not isinstance(t, T.Op):
        raise NotApplicable("a constant inside a unary chain")
    inner = _chain_interval(t.args[0], iv)
    res = MONOTONE[t.prim](inner, t.kwargs)
    if max(abs(res[0]), abs(res[1])) >= SAFE:
        raise NotApplicable("chain intermediate may leave the safe int64 range")
    return res


def _requant_single_input(p: dict) -> Interval:
    m, sh = int(p["multiplier"]), int(p["shift"])
    return _single_input_cached(m, sh)


@lru_cache(maxsize=1024)
def _single_input_cached(m: int, sh: int) -> Interval:
    def single(x):
        return single_round(NUMPY, np.asarray(x, dtype=np.int64), m, sh)

    levels = np.array([INT32_MIN, INT32_MAX + 1], dtype=np.int64)
    guess = _inv_single_round(levels, m, sh) if m > 0 else None
    t = first_at_least(single, levels, INT32_MIN, INT32_MAX, guess)
    return int(t[0]), int(t[1]) - 1


# The input interval on which each chain primitive's precondition holds.
PRE_INPUT: dict[str, Callable[[dict], Interval]] = {
    "requant_double": lambda p: (
        INT32_MIN >> max(int(p["shift"]), 0),
        INT32_MAX >> max(int(p["shift"]), 0),
    ),
    "requant_single": _requant_single_input,
    "requant_float": lambda p: (INT32_MIN, INT32_MAX),
}


def _chain_ops(cut: T.Term) -> list[T.Op]:
    """The ops of a monotone chain, innermost first."""
    chain: list[T.Op] = []
    t = cut
    while isinstance(t, T.Op):
        chain.append(t)
        t = t.args[0]
    chain.reverse()
    return chain


def valid_interval(
    cut: T.Term, var: str, lo: int, hi: int, closed_form: bool = True
) -> Interval | None:
    """The sub-interval of [lo, hi] where every precondition inside the chain holds (None: empty)."""
    chain = _chain_ops(cut)
    va, vb = lo, hi
    for i, o in enumerate(chain):
        if o.prim not in PRE_INPUT:
            if primitive(o.prim).precondition is not None:
                raise NotApplicable(f"no precondition interval known for {o.prim}")
            continue
        pa, pb = PRE_INPUT[o.prim](o.kwargs)
        if not i and closed_form and va <= vb:
            # The op's input is the variable itself: its precondition interval is the
            # variable's, [pa, pb] (what `first_at_least` finds for the identity).
            va, vb = max(va, pa), min(vb, pb)
            if va > vb:
                return None
            continue
        inner: T.Term = chain[i - 1] if i else T.Var(var)
        _chain_interval(inner, (va, vb))

        def f(x, inner=inner):
            return T.evaluate(inner, NUMPY, {var: x})

        levels = np.array([pa, pb + 1], dtype=np.int64)
        guess = chain_guess(chain[:i], levels) if closed_form else None
        t = first_at_least(f, levels, va, vb, guess)
        a, b = int(t[0]), int(t[1]) - 1
        va, vb = max(va, a), min(vb, b)
        if va > vb:
            return None
    return va, vb


def _thresholds(cut: T.Term, var: str, lo: int, hi: int, closed_form: bool = True) -> np.ndarray:
    """Segment bounds of one chain on [lo, hi]: its precondition interval's ends and its steps."""
    if closed_form and not isinstance(cut, T.Var) and INT32_MIN <= lo <= hi <= INT32_MAX:
        shared = _PREFETCHED.get((cut, var)) or _shared_steps(cut, var)
        if shared is not None:
            va_g, vb_g, steps, _ = shared
            va, vb = max(lo, va_g), min(hi, vb_g)
            if va > vb:
                return np.array([], dtype=np.int64)
            inside = steps[(steps > va) & (steps <= vb)]
            return np.concatenate([np.array([va, vb + 1], dtype=np.int64), inside])
    return _local_staircase(cut, var, lo, hi, closed_form)[0]


SHARED_LEVELS = 4096  # a chain with at most this many values on int32 caches its steps


# (va, vb, steps, value at va): a chain on its valid interval [va, vb] over int32
Staircase = tuple[int, int, np.ndarray, int | None]


@lru_cache(maxsize=512)
def _shared_steps(cut: T.Term, var: str) -> Staircase | None:
    """A chain's valid interval, steps and value at the interval's start over the whole
    int32 range, computed once per chain.

    Columns that share a requantizer but differ in accumulator range (or table) share
    this: on a sub-range [lo, hi] the steps are exactly those in (lo, hi] (monotonicity),
    and the valid interval is the intersection. None where the chain takes too many
    values on int32 (then each range is computed on its own).
    """
    try:
        th, base = _local_staircase(cut, var, INT32_MIN, INT32_MAX, True, SHARED_LEVELS)
    except NotApplicable:
        return None
    if th.size == 0:
        return (1, 0, th, None)  # empty valid interval: every sub-range is empty too
    th.setflags(write=False)
    return int(th[0]), int(th[1]) - 1, th[2:], base


# Steps of float-scale requantizers computed for many columns at once (`prefetch`).
_PREFETCHED: dict[tuple[T.Term, str], Staircase] = {}
PREFETCH_LIMIT = 1 << 16  # chains kept; the dict is emptied when it would grow beyond


# Decisions made for many columns at once (`prover.segments_many`), by obligation hash:
# each is returned once by `decide`, as it would have computed it.
DECIDED: dict[str, Decision] = {}


def clear_shared_steps() -> None:
    """Forget every chain's cached steps and prefetched decisions (benchmarks measuring a
    cold decision)."""
    _PREFETCHED.clear()
    DECIDED.clear()
    _shared_steps.cache_clear()
    _single_input_cached.cache_clear()


def prefetch(obligations: Sequence[Obligation]) -> int:
    """Compute the steps of every float-scale requantizer chain of `obligations` in one pass.

    Per-channel columns each have their own float scale, so none shares a chain; the
    thresholds over int32 of every `requant_float(var)` (optionally followed by clips and
    saturations) are guessed for all columns at once (`stepinverse.inv_float_scale`,
    per-level scales) and checked in one call of the kernel's own float32 requantization,
    `f(t-1) < q <= f(t)` for every level. A clamp after it keeps the thresholds of the
    levels inside its range (`clamp(y) >= q` iff `y >= q` there). Only columns whose every
    threshold passes are cached; the rest are computed alone when decided. Returns the
    number of chains cached. Verdicts do not depend on it.
    """
    chains: dict[tuple[T.Term, str], tuple[T.Op, int, int]] = {}
    for ob in obligations:
        if len(ob.variables) != 1:
            continue
        var = ob.variables[0]
        cs: set = set()
        for t in ob.outputs_before + ob.outputs_after:
            cuts(t, cs)
        for c in cs:
            if (c, var) in _PREFETCHED or (c, var) in chains:
                continue
            found = _float_then_clamps(c)
            if found is not None:
                chains[(c, var)] = found
    if len(_PREFETCHED) + len(chains) > PREFETCH_LIMIT:
        _PREFETCHED.clear()
    by_out: dict[str, list[T.Op]] = {}
    for rq_op, _, _ in chains.values():
        by_out.setdefault(str(rq_op.kwargs["out"]), []).append(rq_op)
    steps: dict[T.Op, tuple[int, int, np.ndarray, np.ndarray]] = {}
    for out_name, ops in by_out.items():
        steps.update(_float_steps(out_name, sorted(set(ops), key=repr)))
    done = 0
    for (c, var), (rq_op, lo_c, hi_c) in chains.items():
        if rq_op not in steps:
            continue
        r_min, r_max, levels, ts = steps[rq_op]
        lo_l, hi_l = min(max(r_min, lo_c), hi_c), min(max(r_max, lo_c), hi_c)
        mine = ts[(levels > lo_l) & (levels <= hi_l)].copy()
        mine.setflags(write=False)
        _PREFETCHED[(c, var)] = (INT32_MIN, INT32_MAX, mine, lo_l)
        done += 1
    return done


def _float_then_clamps(c: T.Term) -> tuple[T.Op, int, int] | None:
    """(the requant_float, L, H) when `c` is clamp_[L,H](requant_float(var)), else None."""
    ops = _chain_ops(c)
    if not ops or ops[0].prim != "requant_float" or not isinstance(ops[0].args[0], T.Var):
        return None
    lo_c, hi_c = -SAFE, SAFE  # a composition of clamps is the clamp to its two limits
    for o in ops[1:]:
        if o.prim == "clip":
            a, b = int(o.kwargs["lo"]), int(o.kwargs["hi"])
        elif o.prim == "saturate":
            ty = int_type(o.kwargs["type"])
            a, b = ty.min, ty.max
        else:
            return None
        if a > b:
            return None  # the kernel rejects it when decided
        lo_c, hi_c = min(max(lo_c, a), b), min(max(hi_c, a), b)
    return ops[0], lo_c, hi_c


def _float_steps(out_name: str, ops: list[T.Op]) -> dict:
    """Per requant_float op: (value at INT32_MIN, at INT32_MAX, levels, checked thresholds)."""
    out = int_type(out_name)
    keep = []
    for c in ops:
        try:
            rq._check_scale(c.kwargs["scale"])
            rq._check_zp(int(c.kwargs["zp"]), out)
        except KernelError:
            continue  # deciding it raises the kernel's error, as before
        keep.append(c)
    if not keep:
        return {}
    s32 = np.array([np.float32(c.kwargs["scale"]) for c in keep], dtype=np.float32)
    zp = np.array([int(c.kwargs["zp"]) for c in keep], dtype=np.int64)
    ends = np.array([INT32_MIN, INT32_MAX], dtype=np.int64)
    with np.errstate(over="ignore"):
        fe = rq.requant_float_concrete(ends[None, :], s32[:, None], zp[:, None], out)
    counts = fe[:, 1] - fe[:, 0]
    cols = np.flatnonzero(counts <= SHARED_LEVELS)
    n = counts[cols]
    col = np.repeat(cols, n)
    starts = np.cumsum(n) - n
    levels = np.repeat(fe[cols, 0] + 1, n) + np.arange(col.size) - np.repeat(starts, n)
    guess = inv_float_scale(levels - zp[col], s32[col])
    t = np.minimum(np.maximum(guess, INT32_MIN + 1), INT32_MAX)
    with np.errstate(over="ignore"):
        f = rq.requant_float_concrete(
            np.concatenate([t - 1, t]), np.tile(s32[col], 2), np.tile(zp[col], 2), out
        )
    good = (f[: t.size] < levels) & (levels <= f[t.size :])
    bad = set(unique(col[~good]).tolist())  # np.unique imports numpy.ma (13 ms)
    res = {}
    for k, i in enumerate(cols.tolist()):
        if i in bad:
            continue
        sl = slice(int(starts[k]), int(starts[k] + n[k]))
        res[keep[i]] = (int(fe[i, 0]), int(fe[i, 1]), levels[sl], t[sl])
    return res


def _local_staircase(
    cut: T.Term,
    var: str,
    lo: int,
    hi: int,
    closed_form: bool = True,
    limit: int = LEVEL_LIMIT,
) -> tuple[np.ndarray, int | None]:
    """A chain's segment bounds on [lo, hi], [va, vb + 1, steps...] for its valid interval
    [va, vb] (empty where there is none), and its value at va (None there): on [va, vb] the
    chain is that value plus the number of steps at or below the point."""
    iv = valid_interval(cut, var, lo, hi, closed_form)
    if iv is None:
        return np.array([], dtype=np.int64), None
    va, vb = iv
    edges = np.array([va, vb + 1], dtype=np.int64)
    bound = _chain_interval(cut, (va, vb))
    if closed_form and not isinstance(cut, T.Var):
        guessed = _guessed_steps(cut, var, va, vb, bound)
        if guessed is not None:
            return np.concatenate([edges, guessed[1]]), guessed[0]
    pre: list = []
    ends = np.asarray(
        T.evaluate(cut, NUMPY, {var: np.array([va, vb], dtype=np.int64)}, pre), dtype=np.int64
    )
    if not all(bool(np.all(p)) for p in pre):
        raise NotApplicable("internal: a chain precondition fails inside its valid interval")
    vmin, vmax = int(ends[0]), int(ends[1])
    if vmax < vmin:
        raise NotApplicable("internal: chain decreasing between the ends of the range")
    if vmax - vmin > limit:
        raise NotApplicable(f"a monotone chain takes up to {vmax - vmin + 1} values")

    def f(x):
        return T.evaluate(cut, NUMPY, {var: x})

    if isinstance(cut, T.Var):
        steps = np.arange(va + 1, vb + 1, dtype=np.int64)
    elif closed_form:
        levels = np.arange(vmin + 1, vmax + 1, dtype=np.int64)
        steps = first_at_least(f, levels, va, vb, chain_guess(_chain_ops(cut), levels))
    else:
        steps = bracketed_thresholds(f, vmin, vmax, va, vb)
    return np.concatenate([edges, np.asarray(steps, dtype=np.int64)]), vmin


def _guessed_steps(
    cut: T.Term, var: str, va: int, vb: int, bound: Interval
) -> tuple[int, np.ndarray] | None:
    """(the chain's value at va, the steps `_local_staircase` computes (closed form)), in
    one evaluation of the chain:
    its ends and every closed-form guess at once, the guesses made for every level of the
    chain's output bound (`_chain_interval`) before the ends tell which levels it takes.

    None (the caller then computes them as before, ends first) unless that bound has at most
    SHARED_LEVELS levels and holds both ends, every precondition holds at every point, and
    every guess of a level between the ends is accepted, `f(t-1) < q <= f(t)` (as in
    `staircase.first_at_least`, which then returns the same guesses).
    """
    lo_b, hi_b = bound
    if hi_b - lo_b > SHARED_LEVELS:
        return None
    levels = np.arange(lo_b + 1, hi_b + 1, dtype=np.int64)
    guess = chain_guess(_chain_ops(cut), levels)
    if guess is None:
        return None
    n = levels.size
    g = fast_clip(guess, va, vb + 1)
    pts = fast_clip(np.concatenate([np.array([va, vb], dtype=np.int64), g - 1, g]), va, vb)
    pre: list = []
    v = np.asarray(T.evaluate(cut, NUMPY, {var: pts}, pre), dtype=np.int64)
    if not all(bool(np.all(p)) for p in pre):
        return None
    vmin, vmax = int(v[0]), int(v[1])
    if not lo_b <= vmin <= vmax <= hi_b:
        return None
    keep = slice(vmin - lo_b, vmax - lo_b)  # the levels vmin+1 .. vmax
    q, t = levels[keep], g[keep]
    below = (t == va) | (v[2 : 2 + n][keep] < q)  # f(t-1) < q
    above = (t == vb + 1) | (v[2 + n :][keep] >= q)  # f(t) >= q
    if not (below & above).all():
        return None
    return vmin, t


GRID = 4096


def bracketed_thresholds(f, vmin: int, vmax: int, lo: int, hi: int) -> np.ndarray:
    """`staircase.monotone_thresholds`, with the binary search started from a coarse grid.

    One vectorised evaluation of the non-decreasing `f` on GRID+1 points brackets every
    threshold between two grid points; the exact search then runs inside each bracket
    (about log2((hi-lo)/GRID) rounds instead of log2(hi-lo)). Same result, by monotonicity.
    """
    if hi - lo <= 2 * GRID:
        return monotone_thresholds(f, vmin, vmax, lo, hi)
    g = unique(np.linspace(lo, hi, GRID + 1).round().astype(np.int64))
    fg = np.asarray(f(g), dtype=np.int64)
    levels = np.arange(vmin + 1, vmax + 1, dtype=np.int64)
    i = np.searchsorted(fg, levels, side="left")  # first grid point with f >= level
    a = np.where(i == 0, lo, g[np.maximum(i - 1, 0)] + 1)
    b = np.where(i >= g.size, hi + 1, g[np.minimum(i, g.size - 1)])
    a = np.where(i >= g.size, hi + 1, a)
    while True:
        active = a < b
        if not active.any():
            return a
        mid = a + (b - a) // 2
        fm = np.asarray(f(np.where(active, mid, lo)), dtype=np.int64)
        up = active & (fm >= levels)
        b = np.where(up, mid, b)
        a = np.where(active & ~up, mid + 1, a)


def _nearest_zero(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    return np.where(s > 0, s, np.where(e < 0, e, 0))


def _segments(ob: Obligation, closed_form: bool = True) -> tuple[str, np.ndarray, np.ndarray, set]:
    """(variable, starts, ends, the cuts): the constant pieces of both sides."""
    if len(ob.variables) != 1:
        raise NotApplicable("segments handle exactly one free variable")
    var = ob.variables[0]
    lo, hi = ob.ranges[var]
    if lo > hi:
        raise VacuousObligation(f"empty range [{lo}, {hi}] for {var}")
    if not fits(ob):
        raise NotApplicable("values may leave the int64 range numpy computes in")
    cs: set = set()
    for t in ob.outputs_before + ob.outputs_after:
        cuts(t, cs)
    bounds = [np.array([lo], dtype=np.int64)]
    for c in sorted(cs, key=T.canonical_text):  # canonical(to_json(c)), memoized
        th = _thresholds(c, var, lo, hi, closed_form)
        bounds.append(th[(th >= lo) & (th <= hi)])
    starts = unique(np.concatenate(bounds))
    ends = np.append(starts[1:] - 1, hi)
    return var, starts, ends, cs


def _cut_values(cs: set, var: str, lo: int, hi: int, starts: np.ndarray) -> dict:
    """Per cut whose staircase over int32 is known (`_shared_steps`, `prefetch`): its values
    and its chain's preconditions at the segment starts, read from that staircase.

    Exact by monotonicity: on its valid interval [va, vb] a chain is its value at va plus
    the number of its steps at or below the point (each step checked as the least point
    reaching its level), and every precondition of the chain holds exactly there. Outside
    it the value is the staircase's at the nearest end, which means nothing (a failing
    precondition decides those points), as an evaluation's would.
    """
    known: dict = {}
    if not INT32_MIN <= lo <= hi <= INT32_MAX:
        return known
    for c in cs:
        if isinstance(c, T.Var):
            continue
        st = _PREFETCHED.get((c, var)) or _shared_steps(c, var)
        if st is None:
            continue
        va, vb, steps, base = st
        if base is None:
            continue
        inside = fast_clip(starts, va, vb)
        ok = inside == starts
        known[c] = (base + NUMPY.step_count(inside, steps), ok)
    return known


@dataclass(frozen=True)
class Pieces:
    """Both sides of a one-variable obligation, exactly, as constant pieces.

    On `[starts[i], ends[i]]` the first output of `before` is `before[i]` and of
    `after` is `after[i]`; `assumed[i]` / `defined[i]` say whether the reference's /
    the implementation's preconditions hold there (values are meaningless elsewhere).
    """

    var: str
    starts: np.ndarray
    ends: np.ndarray
    before: np.ndarray
    after: np.ndarray
    assumed: np.ndarray
    defined: np.ndarray


def pieces(ob: Obligation) -> Pieces:
    """The exact piecewise-constant values of both sides (the data `decide` decides on).

    Raises `NotApplicable` where `decide` would (not a one-variable monotone-chain term).
    """
    var, starts, ends, _ = _segments(ob)
    env = {var: starts}
    pre_b: list = []
    pre_a: list = []
    with np.errstate(all="ignore"):
        b = T.evaluate(ob.outputs_before[0], NUMPY, env, pre_b)
        a = T.evaluate(ob.outputs_after[0], NUMPY, env, pre_a)
    n = starts.size
    return Pieces(
        var,
        starts,
        ends,
        np.broadcast_to(np.asarray(b, dtype=np.int64), (n,)).copy(),
        np.broadcast_to(np.asarray(a, dtype=np.int64), (n,)).copy(),
        _all_true(pre_b, n),
        _all_true(pre_a, n),
    )


def decide(ob: Obligation, deadline: float | None = None, *, closed_form: bool = True) -> Decision:
    """Exact verdict by segments; `NotApplicable` when the obligation has another shape.

    `closed_form=False` finds every threshold by binary search alone (the reference the
    closed forms are tested against; same result, slower).
    """
    if DECIDED and closed_form:
        made = DECIDED.pop(ob.hash, None)
        if made is not None:
            return made
    t0 = time.perf_counter()
    var, starts, ends, cs = _segments(ob, closed_form)
    known = _cut_values(cs, var, *ob.ranges[var], starts) if closed_form else {}
    assumed, defined, diff = evaluate_block(ob, {var: starts}, starts.size, known)
    if not assumed.any():
        raise VacuousObligation("no value in the range satisfies the reference's preconditions")
    md = largest_diff(assumed, defined, diff)
    max_diff = 0 if md is None else md
    bad = np.nonzero(violations(ob, assumed, defined, diff))[0]
    ms = (time.perf_counter() - t0) * 1000
    ver = f"numpy {np.__version__}"
    stats = {"segments": int(starts.size), "cuts": len(cs)}
    if bad.size == 0:
        return Decision(HOLDS, "segments", ver, max_diff=max_diff, time_ms=ms, stats=stats)
    near = _nearest_zero(starts[bad], ends[bad])
    # the simplest (`rank` is one-to-one, so the smallest rank is one value); `fits` keeps
    # every value below 2^62 in magnitude, so `rank_array`'s 2v cannot wrap
    best = int(near[int(np.argmin(rank_array(near)))])
    return Decision(VIOLATED, "segments", ver, {var: best}, True, max_diff, time_ms=ms, stats=stats)
