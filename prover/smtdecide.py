"""Deciding an obligation with an SMT backend, including minimisation and max_diff.

Queries (all on the same SMT-LIB2 encoding, see `smtlib.py`):
- violation: domain /\\ some |before-after| > bound. unsat -> holds (after a vacuity
  check: the domain alone must be sat); sat -> witness.
- minimisation (budgeted): for each variable in canonical order, the smallest
  rank(v) that still admits a violation, by exponential then binary search.
  A witness found before the budget ran out is still a reproduced witness,
  only flagged `minimal=False`.
- largest difference (bounded policies, once proven): binary search on
  "some |before-after| >= D" for D in [1, bound].
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .counterexample import rank
from .decision import HOLDS, UNKNOWN, VIOLATED, Decision, Outcome
from .errors import VacuousObligation
from .lazy import lazy_module
from .obligation import Obligation
from .smtlib import Encoding
from .solvers import Budget, SatResult, run, version

if TYPE_CHECKING:
    import z3
else:
    z3 = lazy_module("z3")


class _Session:
    def __init__(self, ob: Obligation, backend: str, budget: Budget, deadline: float):
        self.ob, self.backend, self.budget, self.deadline = ob, backend, budget, deadline
        self.enc = Encoding(ob)
        self.queries = 0

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def ask(self, *constraints: z3.BoolRef) -> SatResult:
        left = self.remaining()
        if left <= 0:
            return SatResult("unknown", reason="time budget ran out")
        self.queries += 1
        b = Budget(timeout_s=left, rlimit=self.budget.rlimit)
        text = self.enc.script(*constraints)
        return run(self.backend, text, self.ob.variables, b, width=self.enc.width)


def _minimise(s: _Session, witness: dict[str, int]) -> tuple[dict[str, int], bool]:
    fixed: list[z3.BoolRef] = []
    best = dict(witness)
    viol = s.enc.violation()
    for name in s.ob.variables:
        v = s.enc.vars[name]
        hi = rank(best[name])  # a violation with rank <= hi exists; none below lo
        lo, step, galloping = 0, 1, True
        while lo < hi:
            mid = min(lo + step - 1, hi - 1) if galloping else (lo + hi) // 2
            r = s.ask(viol, *fixed, s.enc.rank_at_most(name, mid))
            if r.status == "unknown":
                return best, False
            if r.status == "sat":
                best, hi, galloping = r.model, rank(r.model[name]), False
            else:
                lo, step = mid + 1, step * 2
        fixed.append(v == best[name])
    return best, True


def _max_diff(s: _Session) -> int | None:
    lo, hi = 0, s.enc.bound  # some diff >= lo is reachable; none > hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        r = s.ask(s.enc.violation(at_least=mid))
        if r.status == "unknown":
            return None
        if r.status == "sat":
            lo = mid
        else:
            hi = mid - 1
    return lo


def decide(
    ob: Obligation,
    backend: str,
    budget: Budget,
    minimise: bool = True,
    deadline: float | None = None,
) -> Decision:
    """Decide `ob` with SMT backend `backend` ("bitwuzla" | "z3" | "cvc5")."""
    t0 = time.perf_counter()
    deadline = t0 + budget.timeout_s if deadline is None else deadline
    s = _Session(ob, backend, budget, deadline)
    ver = f"{backend} {version(backend)}"

    def done(status: Outcome, **kw) -> Decision:
        ms = (time.perf_counter() - t0) * 1000
        return Decision(status, backend, ver, time_ms=ms, stats={"queries": s.queries}, **kw)

    r = s.ask(s.enc.violation())
    if r.status == "unknown":
        return done(UNKNOWN, reason=r.reason)
    if r.status == "sat":
        witness, minimal = r.model, False
        if minimise:
            witness, minimal = _minimise(s, witness)
        return done(VIOLATED, witness=witness, minimal=minimal)
    dom = s.ask()
    if dom.status == "unsat":
        raise VacuousObligation("no assignment in the ranges satisfies the primitive preconditions")
    if dom.status == "unknown":
        return done(UNKNOWN, reason="vacuity check: " + dom.reason)
    md = 0 if ob.policy.bound == 0 else _max_diff(s)
    return done(HOLDS, max_diff=md)
