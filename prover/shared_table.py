"""Complete search for ONE table shared by several column groups (issue 16, item a).

A MatMul's fixed-point postprocessor holds one table `T` (indices `0..size-1`, offset
order) and per column group a choice `(scheme, shift, multiplier M, zero point zp)`. The
choice is right for group g iff `T[I(acc)] == before_g(acc)` for every reachable `acc`,
with `I(acc) = saturate(Q(acc; M) + zp) - mid.min`.

Why `decide` is complete (every step is exact; nothing is sampled):

1. A shared choice must be valid for its group alone (a shared table is one particular
   free table), so only the group's valid multipliers matter. `synthesis._window` and
   `synthesis._step` give them per scheme and shift exactly, as intervals
   (`_valid_intervals`); every scheme and shift of the space is enumerated.
2. When the effective multiplier is below one (`M * 2^max(shift,0) < 2^31`, double
   rounding; `M < 2^(31-shift)`, single), `Q(acc+1) - Q(acc) <= 1`, so group g's read
   indices are contiguous and the indices it constrains, with their values, are fixed by
   `Q` at the segment ends `X = {lo, c-1, c, hi}` (`c` the change points): run k of
   value `v_k` covers `[Q(a_k), Q(b_k)] + zp`. `Q(x; M)` is monotone in `M`, so on a
   valid interval the vector `Q(X; M)` changes only at the breakpoints where some
   `Q(x)` crosses a level (one exact boundary each, `_level_sets`); one representative
   per piece covers every multiplier of the interval. Wider multipliers (never seen on
   real requantizers) are not enumerated: the answer then stays "not_found".
3. Up to the position of its first change point (`j1 = Q(c_1) + zp - mid.min`), a
   piece's partial table is its run lengths (the first and last clipped at `size`: a
   longer run always saturates). The valid zero points of a multiplier are exactly
   `[mid.min + 1 - Q(c_1), mid.max - 1 - Q(c_n - 1)]` inside the space's zero points,
   so each distinct run-length key gets the set of its positions. The group's options
   are these (key, position) partial tables, deduplicated: the enumeration is exact.
4. A shared table exists iff one option per group can be picked with all fixed entries
   equal (a constraint satisfaction problem over `T`). `_search` is a depth-first search
   with forward checking (the group with the fewest options left first; after each pick,
   every other group keeps only the options agreeing with the table so far); it
   explores every combination not ruled out by such a disagreement, so "no table" is a
   proof. A time or size budget that runs out (seconds, multiplier pieces, partial tables
   per group, search depth) gives "not_found", never "impossible".

A constant group (no change point) reads one value; with free zero points the
multiplier 0 reads exactly one index, any index, and any other choice reads a superset
of indices with the same value, so single-index options are complete. With a fixed zero
point they are not, and such a group makes the answer "not_found" at best.

The certificate of "impossible": a minimal set of groups (dropping any one of them makes
a table exist) with no common table; `verify_minimal` re-checks it with the same exact
search. For two groups with few options it also names, per pair of options, one index
both read with the accumulators and reference outputs that disagree there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .domain import NUMPY
from .inttypes import int_type
from .lut import reorder_table
from .synthesis import (
    Conflict,
    FixedEpilogue,
    FixedPointSpace,
    Intervals,
    Synthesis,
    _level_sets,
    _Problem,
    _q,
    _shift_fits,
    change_points,
    fit_table,
    reference_of,
    synthesize,
    valid_multipliers,
)
from .terms import Term, Var, evaluate
from .uniq import unique

FREE = np.iinfo(np.int64).min  # an index the option does not read
Params = tuple[str, int, int, int]  # scheme, shift, multiplier, zero point


@dataclass
class Options:
    """Every distinct partial table one group's valid choices induce (`rows`, offset
    order, FREE where not read) with one choice producing each (`params`)."""

    rows: np.ndarray
    params: list[Params]
    complete: bool  # False: some valid choices were not enumerated (see module doc)


@dataclass(frozen=True)
class Witness:
    """Options `params` (of the certificate's two groups) both read `index`, at which the
    accumulators `accs` give different reference outputs `outputs`."""

    params: tuple[Params, Params]
    index: int
    accs: tuple[int, int]
    outputs: tuple[int, int]


@dataclass(frozen=True)
class SharedTableResult:
    """`status` "found" (`params` per group, one table), "impossible" (`minimal`: indices of
    groups with no common table, minimal) or "not_found" (budget or incomplete)."""

    status: str
    params: tuple[FixedEpilogue, ...] | None
    minimal: tuple[int, ...] = ()
    options: tuple[int, ...] = ()  # option count per group enumerated (a prefix when impossible)
    witnesses: tuple[Witness, ...] = ()
    time_ms: float = 0.0
    note: str = ""
    extra: dict[str, object] = field(default_factory=dict)


def _deadline_check(deadline: float) -> None:
    if time.perf_counter() > deadline:
        raise TimeoutError("time budget exhausted")


def _valid_intervals(p: _Problem) -> Intervals:
    """Every multiplier of `p`'s scheme and shift for which a zero point separates all
    change points (`synthesis.valid_multipliers`), as intervals."""
    pts = p.points
    n = len(pts)
    cmin, cmax = int(pts.min()), int(pts.max())
    # Necessary: n change points need n distinct levels, Q(cmax) - Q(cmin - 1) >= n; each
    # Q(x; M) is monotone in M, so its extremes over [0, max] are at the two ends.
    ends = np.array([0, p.multiplier_max], dtype=np.int64)
    top = _q(p.scheme, p.shift, np.array([cmax, cmax]), ends).max()
    bottom = _q(p.scheme, p.shift, np.array([cmin - 1, cmin - 1]), ends).min()
    if top - bottom < n:
        return []
    return valid_multipliers(p)[0]


def _contiguous(scheme: str, shift: int, m_max: int) -> bool:
    """Effective multiplier below one: consecutive accumulators move Q by at most one."""
    if scheme == "fixed_double":
        return (m_max << max(shift, 0)) < (1 << 31)
    return m_max < (1 << (31 - shift))


def _representatives(scheme: str, shift: int, xs: np.ndarray, a: int, b: int) -> np.ndarray:
    """One multiplier per piece of [a, b) on which `Q(xs; M)` is constant."""
    qa = _q(scheme, shift, xs, np.full(len(xs), a))
    qb = _q(scheme, shift, xs, np.full(len(xs), b - 1))
    lo_k, hi_k = np.minimum(qa, qb), np.maximum(qa, qb)
    n = (hi_k - lo_k).astype(np.int64)
    if int(n.sum()) == 0:
        return np.array([a], dtype=np.int64)
    rx = np.repeat(xs, n)
    start = np.repeat(lo_k + 1, n)
    rk = start + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    ge_s, _, lt_s, _ = _level_sets(scheme, shift, rx, rk, a, b - 1)
    bps = np.where(rx > 0, ge_s, lt_s)
    return unique(np.concatenate([[a], bps[(bps > a) & (bps < b)]]))


def group_options(
    before: Term,
    var: str,
    lo: int,
    hi: int,
    space: FixedPointSpace,
    deadline: float = float("inf"),
    max_pieces: int = 20_000,
    max_options: int = 50_000,
) -> Options:
    """The distinct partial tables of one group (module docstring, 1.-3.)."""
    ref = reference_of(before, var)
    mid = int_type(space.intermediate_type)
    size = mid.size
    ref_zp = int(ref.node.kwargs["zp"])
    if space.zero_point == "free":
        zmin, zmax = mid.min, mid.max
    elif mid.contains(ref_zp):
        zmin = zmax = ref_zp
    else:
        return Options(np.empty((0, size), np.int64), [], True)
    pts = np.sort(change_points(ref, lo, hi))
    if len(pts) == 0:
        v0 = int(ref.at(np.array([lo]))[0])
        scheme = space.schemes[0]
        shift = next(s for s in space.shifts(scheme) if _shift_fits(scheme, s, lo, hi))
        idx = np.arange(size) if space.zero_point == "free" else np.array([ref_zp - mid.min])
        rows = np.full((len(idx), size), FREE, dtype=np.int64)
        rows[np.arange(len(idx)), idx] = v0
        single = [(scheme, shift, 0, int(j) + mid.min) for j in idx]
        return Options(rows, single, space.zero_point == "free")
    vals = ref.at(np.concatenate([[lo], pts])).astype(np.int64)
    xs = np.concatenate([[lo], pts - 1, pts, [hi]]).astype(np.int64)
    n = len(pts)
    order = pts[np.lexsort((pts, np.abs(pts)))]
    keys: dict[tuple[int, ...], dict[int, Params]] = {}
    complete = True
    pieces = 0
    for scheme in space.schemes:
        for shift in space.shifts(scheme):
            if not _shift_fits(scheme, shift, lo, hi):
                continue
            _deadline_check(deadline)
            p = _Problem(scheme, shift, lo, hi, order, mid.min + 1 - zmax, mid.max - zmin,
                         mid.max - mid.min - 2, (zmin, zmax), mid.min, mid.max,
                         space.multiplier_max, 0.0)  # fmt: skip
            for a, b in _valid_intervals(p):
                if not _contiguous(scheme, shift, b - 1):
                    complete = False
                    continue
                reps = _representatives(scheme, shift, xs, a, b)
                pieces += len(reps)
                if pieces > max_pieces:
                    raise TimeoutError(f"more than {max_pieces} distinct multiplier pieces")
                q = _q(scheme, shift, xs[None, :], reps[:, None])
                q_lo, q_cm1, q_c, q_hi = q[:, 0], q[:, 1 : n + 1], q[:, n + 1 : 2 * n + 1], q[:, -1]
                first = np.minimum(q_c[:, 0] - q_lo, size)
                inner = q_cm1[:, 1:] - q_c[:, :-1] + 1  # runs 1..n-1
                last = np.minimum(q_hi - q_c[:, -1] + 1, size)
                z_lo = np.maximum(mid.min + 1 - q_c[:, 0], zmin)
                z_hi = np.minimum(mid.max - 1 - q_cm1[:, -1], zmax)
                for r in range(len(reps)):
                    key = (int(first[r]), *inner[r].tolist(), int(last[r]))
                    pos = keys.setdefault(key, {})
                    for zp in range(int(z_lo[r]), int(z_hi[r]) + 1):
                        j1 = int(q_c[r, 0]) + zp - mid.min
                        pos.setdefault(j1, (scheme, shift, int(reps[r]), zp))
    if sum(len(pos) for pos in keys.values()) > max_options:
        raise TimeoutError(f"more than {max_options} distinct partial tables in one group")
    rows_l: list[np.ndarray] = []
    params: list[Params] = []
    for key, pos in keys.items():
        lengths = np.array(key, dtype=np.int64)
        canon = np.repeat(vals, lengths)
        for j1, prm in sorted(pos.items()):
            row = np.full(size, FREE, dtype=np.int64)
            start = j1 - key[0]
            a, b = max(start, 0), min(start + len(canon), size)
            row[a:b] = canon[a - start : b - start]
            rows_l.append(row)
            params.append(prm)
    rows = np.array(rows_l, dtype=np.int64).reshape(-1, size)
    return Options(rows, params, complete)


def _consistent(rows: np.ndarray, table: np.ndarray) -> np.ndarray:
    return np.all((rows == FREE) | (table == FREE) | (rows == table), axis=1)


def _search(opts: list[np.ndarray], deadline: float) -> list[int] | None:
    """One option index per group with agreeing entries, or None when there is none."""
    size = opts[0].shape[1] if opts else 0
    alive0 = [np.ones(len(o), dtype=bool) for o in opts]

    def rec(table: np.ndarray, alive: list[np.ndarray], chosen: dict[int, int]):
        _deadline_check(deadline)
        open_ = [g for g in range(len(opts)) if g not in chosen]
        if not open_:
            return dict(chosen)
        g = min(open_, key=lambda i: int(alive[i].sum()))
        for k in np.flatnonzero(alive[g]).tolist():
            row = opts[g][k]
            t2 = np.where(row != FREE, row, table)
            a2 = list(alive)
            ok = True
            for h in open_:
                if h == g:
                    continue
                a2[h] = alive[h] & _consistent(opts[h], t2)
                if not a2[h].any():
                    ok = False
                    break
            if ok:
                got = rec(t2, a2, {**chosen, g: k})
                if got is not None:
                    return got
        return None

    got = rec(np.full(size, FREE, dtype=np.int64), alive0, {})
    return None if got is None else [got[g] for g in range(len(opts))]


def _fill(table: np.ndarray) -> np.ndarray:
    """Unread entries repeat their nearest read neighbour (never read: any value works)."""
    out = table.copy()
    read = np.flatnonzero(out != FREE)
    if not len(read):
        return np.zeros_like(out)
    idx = np.arange(len(out))
    near = read[np.clip(np.searchsorted(read, idx), 0, len(read) - 1)]
    out[out == FREE] = out[near[out == FREE]]
    return out


def _epilogues(groups, opts, pick, space: FixedPointSpace) -> tuple[FixedEpilogue, ...]:
    mid = int_type(space.intermediate_type)
    table = np.full(mid.size, FREE, dtype=np.int64)
    for o, k in zip(opts, pick, strict=True):
        row = o.rows[k]
        table = np.where(row != FREE, row, table)
    physical = reorder_table(_fill(table), mid, "offset", space.index_order)
    tab = tuple(int(v) for v in physical)
    out = []
    for (before, var, lo, hi), o, k in zip(groups, opts, pick, strict=True):
        scheme, shift, m, zp = o.params[k]
        e = FixedEpilogue(scheme, m, shift, zp, mid.name, tab, space.index_order)
        ref = reference_of(before, var)
        pts = change_points(ref, lo, hi)
        probe = unique(np.concatenate([[lo, hi], pts - 1, pts]))
        got = evaluate(e.term(Var("acc")), NUMPY, {"acc": probe})
        if not np.array_equal(np.asarray(got), ref.at(probe)):
            raise AssertionError(f"shared table search proposed {e.to_json()}: differs")
        out.append(e)
    return tuple(out)


def _impossible(rows: list[np.ndarray], members: list[int], deadline: float) -> bool:
    return _search([rows[g] for g in members], deadline) is None


def _minimal(rows: list[np.ndarray], deadline: float) -> list[int]:
    """A minimal subset of groups without a common table (deletion: each dropped group
    leaves the rest still impossible; each kept one is needed)."""
    keep = sorted(range(len(rows)), key=lambda g: len(rows[g]))
    i = 0
    while i < len(keep):
        trial = keep[:i] + keep[i + 1 :]
        if trial and _impossible(rows, trial, deadline):
            keep = trial
        else:
            i += 1
    return sorted(keep)


def _witnesses(groups, opts: list[Options], pair: list[int], space, limit: int) -> list[Witness]:
    a, b = pair
    ra, rb = opts[a].rows, opts[b].rows
    if len(ra) * len(rb) > limit:
        return []
    mid = int_type(space.intermediate_type)
    out = []
    for i in range(len(ra)):
        for j in range(len(rb)):
            bad = np.flatnonzero((ra[i] != FREE) & (rb[j] != FREE) & (ra[i] != rb[j]))
            idx = int(bad[0])
            accs = tuple(_acc_at(groups[g], opts[g].params[k], idx + mid.min, space)
                         for g, k in ((a, i), (b, j)))  # fmt: skip
            outs = (int(ra[i][idx]), int(rb[j][idx]))
            out.append(Witness((opts[a].params[i], opts[b].params[j]), idx, accs, outs))  # type: ignore[arg-type]
    return out


def _acc_at(group, prm: Params, index: int, space: FixedPointSpace) -> int:
    """An accumulator of `group` whose NPU index under `prm` is `index` (binary search)."""
    _, _, lo, hi = group
    scheme, shift, m, zp = prm
    mid = int_type(space.intermediate_type)

    def idx(x: int) -> int:
        q = int(_q(scheme, shift, np.array([x]), np.array([m]))[0])
        return min(max(q + zp, mid.min), mid.max)

    a, b = lo, hi
    while a < b:
        c = (a + b) // 2
        if idx(c) >= index:
            b = c
        else:
            a = c + 1
    return a


def decide(
    groups: list[tuple[Term, str, int, int]],
    space: FixedPointSpace,
    budget_s: float = 30.0,
    witness_limit: int = 16,
    max_options: int = 50_000,
) -> SharedTableResult:
    """One table for every `(before, var, lo, hi)` group, or a proof that none exists
    (a minimal set of groups), or "not_found" when the budget runs out (module doc)."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s

    def ms() -> float:
        return (time.perf_counter() - t0) * 1000

    try:
        # Groups are added one at a time: a prefix with no common table is already the
        # proof (found tables need every group anyway).
        opts: list[Options] = []
        pick = None
        for b, v, lo, hi in groups:
            opts.append(group_options(b, v, lo, hi, space, deadline, max_options=max_options))
            rows = [o.rows for o in opts]
            pick = _search(rows, deadline)
            if pick is None and all(o.complete for o in opts):
                break
        counts = tuple(len(o.rows) for o in opts)
        if pick is not None and len(opts) == len(groups):
            params = _epilogues(groups, opts, pick, space)
            return SharedTableResult("found", params, options=counts, time_ms=ms())
        if not all(o.complete for o in opts):
            why = "some valid choices were not enumerated (effective multiplier >= 1)"
            return SharedTableResult("not_found", None, options=counts, time_ms=ms(), note=why)
        minimal = _minimal(rows, deadline)
    except TimeoutError as e:  # the time or size budget ran out: "not_found"
        return SharedTableResult("not_found", None, time_ms=ms(), note=str(e))
    except RecursionError:  # one search level per group: more groups than Python's stack
        return SharedTableResult("not_found", None, time_ms=ms(), note="too many groups")
    wit = _witnesses(groups, opts, minimal, space, witness_limit) if len(minimal) == 2 else []
    return SharedTableResult("impossible", None, tuple(minimal), counts, tuple(wit), ms())


def verify_minimal(
    groups: list[tuple[Term, str, int, int]], space: FixedPointSpace, minimal: tuple[int, ...]
) -> bool:
    """Re-check a certificate: the set has no common table and every proper subset
    obtained by dropping one group has one."""
    opts = [group_options(*groups[g], space).rows for g in minimal]
    if _search(opts, float("inf")) is not None:
        return False
    return all(
        _search(opts[:i] + opts[i + 1 :], float("inf")) is not None for i in range(len(opts))
    ) if len(opts) > 2 else True  # fmt: skip


@dataclass(frozen=True)
class SharedSynthesis:
    """Parameters for several column groups sharing one table (`status` "found"), a proof
    that none exist (`status` "impossible": some group alone has none, `conflicts` maps
    its index to the pair; or `complete.minimal` names groups with no common table), or
    "not_found" (the complete search ran out of budget: not a proof)."""

    status: str
    params: tuple[FixedEpilogue, ...] | None
    conflicts: dict[int, Conflict]
    alone: tuple[Synthesis, ...]
    candidates_tried: int
    unfit: tuple[int, int] | None  # (group, candidate) of the last failed fit
    time_ms: float
    complete: SharedTableResult | None = None  # the exhaustive search, when it ran


def synthesize_shared(
    groups: list[tuple[Term, str, int, int]],
    space: FixedPointSpace | None = None,
    tables: tuple[tuple[int, ...], ...] = (),
    max_candidates: int = 8,
    budget_s: float = 60.0,
) -> SharedSynthesis:
    """Parameters for every `(before, var, lo, hi)` group with ONE table shared by all.

    Each group is first synthesised alone (free table). A group with no parameters alone
    has none with a shared table either, which is the proof behind "impossible". Otherwise
    candidate tables are tried in order: `tables` (physical, e.g. the reference's own
    table), then the groups' own synthesised tables, widest accumulator range first (it
    holds the most reference values), at most `max_candidates` in all; for a candidate,
    `fit_table` decides exactly whether every group has multiplier, shift and zero point
    reading it. When no candidate fits, `decide` searches every table within
    `budget_s` seconds: "found", "impossible" (a minimal set of groups in
    `complete.minimal`) or "not_found" (budget; proves nothing).
    """
    t0 = time.perf_counter()
    space = space or FixedPointSpace()
    alone = tuple(synthesize(b, v, lo, hi, space) for b, v, lo, hi in groups)
    conflicts = {i: s.conflict for i, s in enumerate(alone) if s.conflict is not None}
    if conflicts:
        ms = (time.perf_counter() - t0) * 1000
        return SharedSynthesis("impossible", None, conflicts, alone, 0, None, ms)
    cands: list[tuple[int, ...]] = []
    wide = sorted(range(len(groups)), key=lambda i: groups[i][2] - groups[i][3])
    synthesised = [p.table for i in wide if (p := alone[i].params) is not None]
    for t in list(tables) + synthesised:
        if t not in cands and len(cands) < max_candidates:
            cands.append(t)
    order = list(range(len(groups)))
    unfit = None
    for ci, table in enumerate(cands):
        got: dict[int, FixedEpilogue] = {}
        for gi in order:
            b, v, lo, hi = groups[gi]
            own = alone[gi].params
            p = own if own is not None and own.table == table else None
            p = p or fit_table(b, v, lo, hi, table, space)
            if p is None:
                unfit = (gi, ci)
                order.remove(gi)
                order.insert(0, gi)  # the hardest group first for the next candidate
                break
            got[gi] = p
        else:
            ms = (time.perf_counter() - t0) * 1000
            params = tuple(got[i] for i in range(len(groups)))
            return SharedSynthesis("found", params, {}, alone, ci + 1, None, ms)
    full = decide(groups, space, budget_s=budget_s)
    ms = (time.perf_counter() - t0) * 1000
    n = len(cands)
    return SharedSynthesis(full.status, full.params, {}, alone, n, unfit, ms, full)


__all__ = [
    "SharedSynthesis",
    "SharedTableResult",
    "Witness",
    "decide",
    "group_options",
    "synthesize_shared",
    "verify_minimal",
]
