"""Counterexample order, concrete replay and construction of the reported `Counterexample`.

Simplicity order: variables in canonical (sorted) order, each compared by
`rank(v)`: 0, 1, -1, 2, -2, ... (smallest magnitude first, positive first).
Every procedure that claims a minimal witness returns the lexicographically
smallest violating assignment in this order, so they agree exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import terms as T
from .domain import NUMPY
from .errors import LiftError, ReplayMismatch
from .lift import lift_row, row_value
from .obligation import Obligation
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
    """(before outputs, after outputs, preconditions hold) at one assignment, concretely."""
    env = {k: np.array([int(v)], dtype=np.int64) for k, v in assignment.items()}
    pre: list = []
    b = tuple(
        int(np.asarray(T.evaluate(t, NUMPY, env, pre)).reshape(-1)[0]) for t in ob.outputs_before
    )
    a = tuple(
        int(np.asarray(T.evaluate(t, NUMPY, env, pre)).reshape(-1)[0]) for t in ob.outputs_after
    )
    ok = all(bool(np.all(p)) for p in pre)
    return b, a, ok


def _unwrap(v: tuple[int, ...]):
    return v[0] if len(v) == 1 else v


def replay(ob: Obligation, assignment: Mapping[str, int]) -> Counterexample:
    """Replay a witness concretely; raise `ReplayMismatch` unless it violates the policy.

    With a LiftSpec, the witness is also lifted to a whole input row, the row is
    run through the kernel's matmul (`matmul.matmul_acc`, vectorised; tests check it equals
    `matmul.dot`), and both sides are replayed on the value it produces.
    """
    assignment = {n: int(assignment[n]) for n in ob.variables}
    for n, (lo, hi) in ob.ranges.items():
        if not lo <= assignment[n] <= hi:
            raise ReplayMismatch(f"witness {n}={assignment[n]} outside its range [{lo}, {hi}]")
    b, a, ok = evaluate_point(ob, assignment)
    if not ok:
        raise ReplayMismatch(f"witness {assignment} violates a primitive precondition")
    diff = max(abs(x - y) for x, y in zip(b, a, strict=True))
    if ob.policy.allows(diff):
        raise ReplayMismatch(
            f"witness {assignment} does not reproduce: before={b} after={a} under {ob.policy}"
        )
    row, note = None, ""
    if ob.lift is not None:
        target = assignment[ob.lift.var]
        try:
            row = lift_row(ob.lift, target)
        except LiftError as e:
            note = str(e)
        if row is not None:
            got = row_value(ob.lift, row)
            env2 = dict(assignment)
            env2[ob.lift.var] = got
            b2, a2, ok2 = evaluate_point(ob, env2)
            if got != target or (b2, a2) != (b, a) or not ok2:
                raise ReplayMismatch(
                    f"lifted input row gives {ob.lift.var}={got} (wanted {target}), "
                    f"before={b2} after={a2}"
                )
    return Counterexample(assignment, _unwrap(b), _unwrap(a), diff, row, note)
