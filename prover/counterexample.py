"""Counterexample order, concrete replay and construction of the reported `Counterexample`.

Simplicity order: variables in canonical (sorted) order, each compared by
`rank(v)`: 0, 1, -1, 2, -2, ... (smallest magnitude first, positive first).
Every procedure that claims a minimal witness returns the lexicographically
smallest violating assignment in this order, so they agree exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import terms as T
from .bounds import fits_at
from .domain import INT_POINT, NUMPY, NumpyDomain
from .errors import LiftError, ReplayMismatch
from .inttypes import int_type
from .lift import lift_row, row_value
from .obligation import LiftSpec, Obligation
from .verdict import Counterexample


def rank(v: int) -> int:
    """0, 1, -1, 2, -2, ... -> 0, 1, 2, 3, 4, ..."""
    return 2 * v - 1 if v > 0 else -2 * v


def rank_array(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.int64)
    return np.where(v > 0, 2 * v - 1, -2 * v)


def rank_key(ob: Obligation, assignment: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(rank(int(assignment[n])) for n in ob.variables)


def evaluate_point(ob: Obligation, assignment: Mapping[str, int]):
    """(before outputs, after outputs, reference defined, implementation defined) at one point.

    Where a side is not defined its outputs are whatever the kernel computes, which
    means nothing (see `primitives` for the sides' rule).
    """
    d: NumpyDomain
    env: dict[str, Any]
    if _point_prims(ob) and fits_at(ob, assignment):
        # Python integers: every value is below 2^63, so they are the int64 values
        d = INT_POINT
        env = {k: int(v) for k, v in assignment.items()}
    else:
        d = NUMPY
        env = {k: np.array([int(v)], dtype=np.int64) for k, v in assignment.items()}
    pre_b: list = []
    pre_a: list = []
    with np.errstate(all="ignore"):
        b = tuple(
            int(np.asarray(T.evaluate(t, d, env, pre_b)).reshape(-1)[0]) for t in ob.outputs_before
        )
        a = tuple(
            int(np.asarray(T.evaluate(t, d, env, pre_a)).reshape(-1)[0]) for t in ob.outputs_after
        )
    ok_b = all(_holds(p) for p in pre_b)
    ok_a = all(_holds(p) for p in pre_a)
    return b, a, ok_b, ok_a


# Primitives whose evaluation at one point may use Python integers (`INT_POINT`): written
# with the `Domain` operations and elementwise arithmetic only (the rest, e.g. `dot` and
# the float32 elementwise kernels, get one-element arrays).
POINT_PRIMS = frozenset(
    {
        "add",
        "sub",
        "add_const",
        "mul_const",
        "clip",
        "saturate",
        "wrap",
        "requant_double",
        "requant_single",
        "requant_float",
        "lut",
        "floordiv_const",
        "mod_const",
    }
)


def _point_prims(ob: Obligation) -> bool:
    """Whether every primitive of `ob` is in POINT_PRIMS."""
    stack: list[T.Term] = [*ob.outputs_before, *ob.outputs_after]
    while stack:
        t = stack.pop()
        if isinstance(t, T.Op):
            if t.prim not in POINT_PRIMS:
                return False
            stack.extend(t.args)
    return True


def _holds(p) -> bool:
    """`bool(np.all(p))`, directly for a scalar truth value."""
    if type(p) is np.bool_ or type(p) is bool:
        return bool(p)
    return bool(np.all(p))


def undefined_at(ob: Obligation, assignment: Mapping[str, int]) -> str:
    """Which implementation-side precondition fails at `assignment` ('' if none)."""
    for t in ob.outputs_after:
        why = T.first_violation(t, assignment)
        if why:
            return why
    return ""


def _unwrap(v: tuple[int, ...]):
    return v[0] if len(v) == 1 else v


def _checked_row(spec: LiftSpec, row: Sequence[int]) -> tuple[int, ...]:
    """A row lifted before (a stored one is data, not trusted): one `x_type` value per weight,
    else `ReplayMismatch` (out-of-range entries can reach any accumulator)."""
    t = int_type(spec.x_type)
    if len(row) != len(spec.weights):
        raise ReplayMismatch(f"lifted input row has {len(row)} entries, not {len(spec.weights)}")
    out = tuple(int(x) for x in row)
    bad = [x for x in out if not t.min <= x <= t.max]
    if bad or any(x != out[i] for i, x in enumerate(row)):
        raise ReplayMismatch(f"lifted input row holds values outside {spec.x_type}: {row}")
    return out


def replay(
    ob: Obligation,
    assignment: Mapping[str, int],
    *,
    lift: bool = True,
    row: tuple[int, ...] | None = None,
) -> Counterexample:
    """Replay a witness concretely; raise `ReplayMismatch` unless it violates the obligation.

    A witness violates it where the reference is defined and the implementation is
    undefined (a failing implementation-side precondition, named in `undefined`) or
    differs beyond the policy. With a LiftSpec, the witness is also lifted to a whole
    input row (or `row`, one lifted before, is checked instead of searching again), the
    row is run through the kernel's matmul (`matmul.matmul_acc`, vectorised; tests check
    it equals `matmul.dot`), and the value it produces must be the witness's own (whose
    replay above is then the row's: the sides are functions of the variables alone).
    `lift=False` replays the witness only (the row is found later, for the one
    counterexample a site reports: `prover.api.lift_refutation`).
    """
    assignment = {n: int(assignment[n]) for n in ob.variables}
    for n, (lo, hi) in ob.ranges.items():
        if not lo <= assignment[n] <= hi:
            raise ReplayMismatch(f"witness {n}={assignment[n]} outside its range [{lo}, {hi}]")
    b, a, ok_b, ok_a = evaluate_point(ob, assignment)
    if not ok_b:
        raise ReplayMismatch(f"witness {assignment} violates a reference-side precondition")
    undefined = "" if ok_a else undefined_at(ob, assignment)
    if not ok_a and not undefined:
        raise ReplayMismatch(f"witness {assignment}: implementation precondition not located")
    diff = None if undefined else max(abs(x - y) for x, y in zip(b, a, strict=True))
    if diff is not None and ob.policy.allows(diff):
        raise ReplayMismatch(
            f"witness {assignment} does not reproduce: before={b} after={a} under {ob.policy}"
        )
    note = ""
    if ob.lift is not None and lift:
        target = assignment[ob.lift.var]
        if row is None:
            try:
                row = lift_row(ob.lift, target)  # it checks that `row_value` gives target
            except LiftError as e:
                note = str(e)
        else:
            row = _checked_row(ob.lift, row)
            got = row_value(ob.lift, row)
            if got != target:
                # the sides at the row's own value, for the message (it is not the witness)
                env2 = {**assignment, ob.lift.var: got}
                b2, a2, _, _ = evaluate_point(ob, env2)
                raise ReplayMismatch(
                    f"lifted input row gives {ob.lift.var}={got} (wanted {target}), "
                    f"before={b2} after={a2}"
                )
        # a row reaches the witness's own value: the point replayed above is the row's
        # (the sides are functions of the variables alone), so it violates too
    else:
        row = None
    after = None if undefined else _unwrap(a)
    return Counterexample(assignment, _unwrap(b), after, diff, row, note, undefined)
