"""Exhaustive enumeration: an independent decision procedure for small domains.

Every assignment of the ranged variables is evaluated concretely (numpy,
vectorised, in chunks) with the kernel's own `terms.evaluate`. Exact verdict,
exact largest difference (over points where both sides are defined), and the
canonical simplest counterexample. A point where the reference's preconditions
fail is skipped; one where only the implementation's fail is a violation.
"""

from __future__ import annotations

import time

import numpy as np

from . import terms as T
from .bounds import fits
from .counterexample import rank_array
from .decision import HOLDS, UNKNOWN, VIOLATED, Decision
from .domain import NUMPY
from .errors import NotApplicable, VacuousObligation
from .obligation import Obligation

DEFAULT_LIMIT = 1 << 25
CHUNK = 1 << 14
GRID_MAX = 1 << 17  # up to this many points every variable's values are laid out at once


def _grid(los: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """Each variable's value at every point (the last variable fastest), by repeating and
    tiling its range instead of dividing every point's index."""
    out = []
    for i, n in enumerate(sizes):
        vals = np.arange(n, dtype=np.int64) + los[i]
        after = int(np.prod(sizes[i + 1 :], dtype=np.int64))
        before = int(np.prod(sizes[:i], dtype=np.int64))
        out.append(np.tile(np.repeat(vals, after), before))
    return out


def _all_true(pre: list, n: int) -> np.ndarray:
    ok = _conjunction(pre, n)
    return np.ones(n, dtype=bool) if ok is None else ok


def _conjunction(pre: list, n: int) -> np.ndarray | None:
    """The conjunction of precondition masks; None when every one holds everywhere."""
    ok = None
    for p in pre:
        p = np.asarray(p, dtype=bool)
        if p.all():
            continue
        p = np.broadcast_to(p, (n,))
        ok = p.copy() if ok is None else ok & p
    return ok


def _block(ob: Obligation, env: dict[str, np.ndarray], n: int, known: dict | None = None):
    """`evaluate_block` with None for a mask that is all true (the common case, kept cheap)."""
    nb = len(ob.outputs_before)
    with np.errstate(all="ignore"):
        # One evaluation of both sides: the subterms they share are computed once.
        sides = (*ob.outputs_before, *ob.outputs_after)
        vals, pres = T.evaluate_shared(sides, NUMPY, env, known)
        diff = None
        for b, a in zip(vals[:nb], vals[nb:], strict=True):
            d = np.abs(np.asarray(b, dtype=np.int64) - np.asarray(a, dtype=np.int64))
            diff = d if diff is None else np.maximum(diff, d)
    diff = np.broadcast_to(np.asarray(diff, dtype=np.int64), (n,))
    pre_b = [p for ps in pres[:nb] for p in ps]
    pre_a = [p for ps in pres[nb:] for p in ps]
    return _conjunction(pre_b, n), _conjunction(pre_a, n), diff


def evaluate_block(ob: Obligation, env: dict[str, np.ndarray], n: int, known: dict | None = None):
    """(assumed, defined, diff) on a block of n assignments.

    `assumed`: the reference side's preconditions hold (elsewhere the reference is
    undefined and the point is outside the obligation); `defined`: the
    implementation side's preconditions hold (elsewhere the point violates the
    obligation whatever the values); `diff`: the largest |before-after|, meaningful
    only where both hold. See `primitives` for why the sides differ. `known`: subterms
    whose values and preconditions at these assignments are known already
    (`terms.evaluate_shared`).
    """
    assumed, defined, diff = _block(ob, env, n, known)
    ones = np.ones(n, dtype=bool)
    return (
        ones if assumed is None else assumed,
        ones if defined is None else defined,
        np.array(diff),
    )


def violations(ob: Obligation, assumed: np.ndarray, defined: np.ndarray, diff: np.ndarray):
    """Mask of points violating `ob`: reference defined, and implementation undefined or off."""
    return assumed & (~defined | (diff > ob.policy.bound))


def largest_diff(assumed: np.ndarray, defined: np.ndarray, diff: np.ndarray) -> int | None:
    """Largest difference where both sides are defined (None where there is no such point)."""
    ok = assumed & defined
    return int(diff[ok].max()) if ok.any() else None


def decide(ob: Obligation, limit: int = DEFAULT_LIMIT, deadline: float | None = None) -> Decision:
    """Decide `ob` by evaluating every assignment; `NotApplicable` above `limit` points."""
    t0 = time.perf_counter()
    size = ob.domain_size
    names = ob.variables
    if size == 0:
        raise VacuousObligation(f"empty variable range in {dict(ob.ranges)}")
    if size > limit:
        raise NotApplicable(f"domain of {size} points exceeds the enumeration limit {limit}")
    if not fits(ob):
        raise NotApplicable("values may leave the int64 range numpy computes in")
    los = np.array([ob.ranges[n][0] for n in names], dtype=np.int64)
    sizes = [ob.ranges[n][1] - ob.ranges[n][0] + 1 for n in names]
    strides = np.cumprod([1] + sizes[::-1][:-1])[::-1]  # last variable fastest
    any_valid, max_diff, best, best_key = False, 0, None, None
    grid = _grid(los, sizes) if 1 < len(names) and size <= GRID_MAX else None
    for start in range(0, size, CHUNK):
        if deadline is not None and time.perf_counter() > deadline:
            return Decision(
                UNKNOWN, "enumerate", reason=f"time budget ran out after {start} points"
            )
        idx = np.arange(start, min(size, start + CHUNK), dtype=np.int64)
        if len(names) == 1:  # one variable: the block is the range itself
            cols = [idx + los[0]]
        elif grid is not None:
            cols = [g[start : start + idx.size] for g in grid]
        else:
            cols = [(idx // strides[i]) % sizes[i] + los[i] for i in range(len(names))]
        env = dict(zip(names, cols, strict=True))
        assumed, defined, diff = _block(ob, env, idx.size)
        if assumed is not None and not assumed.any():
            continue
        any_valid = True
        if assumed is None and defined is None:  # every precondition holds on the block
            max_diff = max(max_diff, int(diff.max()))
            bad = np.flatnonzero(diff > ob.policy.bound)
        else:
            ones = np.ones(idx.size, dtype=bool)
            assumed = ones if assumed is None else assumed
            defined = ones if defined is None else defined
            md = largest_diff(assumed, defined, diff)
            if md is not None:
                max_diff = max(max_diff, md)
            bad = np.nonzero(violations(ob, assumed, defined, diff))[0]
        if bad.size:
            if len(cols) == 1:  # the simplest violation: the smallest rank, one pass
                j = bad[int(np.argmin(rank_array(cols[0][bad])))]
            else:
                ranks = [rank_array(c[bad]) for c in cols]
                j = bad[np.lexsort(ranks[::-1])[0]]
            key = tuple(int(rank_array(c[j])) for c in cols)
            if best_key is None or key < best_key:
                best_key, best = key, {n: int(c[j]) for n, c in zip(names, cols, strict=True)}
    if not any_valid:
        raise VacuousObligation("no assignment in the ranges satisfies the primitive preconditions")
    ms = (time.perf_counter() - t0) * 1000
    ver = f"numpy {np.__version__}"
    if best is None:
        return Decision(
            HOLDS, "enumerate", ver, max_diff=max_diff, time_ms=ms, stats={"points": size}
        )
    return Decision(
        VIOLATED, "enumerate", ver, best, True, max_diff, time_ms=ms, stats={"points": size}
    )
