"""The prover's library API: `check(obligation) -> Verdict`.

Procedures, in the portfolio's order (fastest first; each either decides,
declines as not applicable, or answers unknown within the budget):

1. `segments`  exact, one variable over monotone staircases (milliseconds);
2. `enumerate` exact, every assignment with numpy (small domains);
3. `bitwuzla`, `z3`, `cvc5` on the same SMT-LIB2 encoding.

`solver="auto"` runs the portfolio; naming one runs only that one.
`cross_check=True` also runs the next decisive procedure and raises
`SolverDisagreement` if the two differ (verdict, largest difference, or
minimal counterexample). A witness becomes a refutation only after concrete
replay (and lifting to an input row when the obligation has a LiftSpec);
one that does not reproduce raises `ReplayMismatch`. `unknown` is never a pass.

A stored verdict is served only once checked (`_serve`): a refutation is
replayed, a "proven" re-decided within the store's recheck budget or, beyond
it, accepted on a valid HMAC signature; `details["served"]` says which.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from . import enumerate as _enum
from . import segments as _seg
from . import smtdecide as _smt
from .bounds import fits_at
from .counterexample import replay
from .decision import HOLDS, UNKNOWN, VIOLATED, Decision
from .digits import same_index_maps
from .errors import (
    NotApplicable,
    ProverError,
    ReplayMismatch,
    SolverDisagreement,
    StoreCorrupt,
    StoreMiss,
    VacuousObligation,
)
from .obligation import LiftSpec, Obligation
from .policy import Policy
from .proofstore import ProofStore, StoredRecord
from .reflexive import identical
from .solver_names import ALIASES, PROCEDURE_NAMES, SOLVERS
from .solvers import Budget
from .verdict import Counterexample, Status, Verdict

__all__ = [
    "check",
    "decide",
    "Verdict",
    "Counterexample",
    "Obligation",
    "LiftSpec",
    "Policy",
    "ProofStore",
    "ProverError",
    "VacuousObligation",
    "SolverDisagreement",
    "ReplayMismatch",
    "StoreMiss",
    "StoreCorrupt",
    "PROCEDURES",
    "SOLVERS",
    "solver_name",
]

Procedure = Callable[[Obligation, Budget, float], Decision]

PROCEDURES: dict[str, Procedure] = {
    "segments": lambda ob, b, dl: _segments(ob, dl),
    "enumerate": lambda ob, b, dl: _enum.decide(ob, deadline=dl),
    "bitwuzla": lambda ob, b, dl: _smt.decide(ob, "bitwuzla", b, deadline=dl),
    "z3": lambda ob, b, dl: _smt.decide(ob, "z3", b, deadline=dl),
    "cvc5": lambda ob, b, dl: _smt.decide(ob, "cvc5", b, deadline=dl),
}
PORTFOLIO = ("segments", "enumerate", "bitwuzla", "z3", "cvc5")
if tuple(PROCEDURES) != PROCEDURE_NAMES:  # the CLI offers PROCEDURE_NAMES without this module
    raise ImportError("prover.solver_names.PROCEDURE_NAMES is out of step with PROCEDURES")


def _segments(ob: Obligation, deadline: float) -> Decision:
    """`segments.decide`, two cases decided without its search: sides that are the same
    terms (`reflexive`), and an index map whose two sides have one closed form (`digits`:
    each side's digits of the flat index, term by term)."""
    t0 = time.perf_counter()
    form = "identical" if identical(ob) else None
    if form is None and ob.kind == "index_map" and same_index_maps(ob):
        form = "digits"
    if form is not None:
        ms = (time.perf_counter() - t0) * 1000
        return Decision(
            HOLDS, "segments", f"numpy {np.__version__}", max_diff=0, time_ms=ms,
            stats={"closed_form": form},
        )  # fmt: skip
    return _seg.decide(ob, deadline=deadline)


def solver_name(name: str) -> str:
    """The procedure a solver name means ("auto" or a key of PROCEDURES); ValueError if none."""
    name = ALIASES.get(name, name)
    if name != "auto" and name not in PROCEDURES:
        raise ValueError(f"unknown solver {name!r}; known: {', '.join(SOLVERS)}")
    return name


def _try(name: str, ob: Obligation, budget: Budget, deadline: float) -> Decision | None:
    try:
        return PROCEDURES[name](ob, budget, deadline)
    except NotApplicable:
        return None


def _agree(a: Decision, b: Decision) -> str | None:
    if a.status != b.status:
        return f"{a.procedure} says {a.status}, {b.procedure} says {b.status}"
    if a.max_diff is not None and b.max_diff is not None and a.max_diff != b.max_diff:
        return f"largest difference {a.max_diff} ({a.procedure}) vs {b.max_diff} ({b.procedure})"
    if a.status == VIOLATED and a.minimal and b.minimal and a.witness != b.witness:
        return f"minimal counterexample {a.witness} ({a.procedure}) vs {b.witness} ({b.procedure})"
    return None


def decide(
    ob: Obligation, solver: str = "auto", budget: Budget | None = None, cross_check: bool = False
) -> list[Decision]:
    """Run the procedure(s); returns the decisions made (first = the answer)."""
    budget = budget or Budget()
    deadline = time.perf_counter() + budget.timeout_s
    solver = solver_name(solver)
    order: tuple[str, ...]
    if solver == "auto":
        order = PORTFOLIO
    else:
        order = (solver,) + tuple(p for p in PORTFOLIO if p != solver) if cross_check else (solver,)
    made: list[Decision] = []
    for name in order:
        d = _try(name, ob, budget, deadline)
        if d is None:
            continue
        made.append(d)
        decisive = [m for m in made if m.decisive]
        if len(decisive) >= (2 if cross_check else 1):
            break
    decisive = [m for m in made if m.decisive]
    if cross_check and len(decisive) >= 2:
        why = _agree(decisive[0], decisive[1])
        if why:
            raise SolverDisagreement(f"obligation {ob.hash[:12]}: {why}")
    if not made:
        raise ProverError(f"no decision procedure applies to obligation {ob.hash[:12]}")
    return decisive + [m for m in made if not m.decisive]


def _resolve_store(store: ProofStore | str | os.PathLike | None) -> ProofStore | None:
    if store is None or isinstance(store, ProofStore):
        return store
    return ProofStore(store)


def check(
    obligation: Obligation,
    timeout_s: float = 10.0,
    solver: str = "auto",
    store: ProofStore | str | os.PathLike | None = None,
    cross_check: bool = False,
    rlimit: int | None = None,
    lift: bool = True,
) -> Verdict:
    """Decide `obligation` under its policy; see the module docstring.

    `lift=False`: a refutation's witness is replayed but not yet lifted to an input row
    (`needs_lift`); such a verdict is not stored until `lift_refutation` lifts it, which
    a caller does only for the counterexample it reports.
    """
    t0 = time.perf_counter()
    ob = obligation
    ps = _resolve_store(store)
    if ps is not None:
        served = _serve(ob, ps, rlimit, t0)
        if served is not None:
            return served
    budget = Budget(timeout_s, rlimit if rlimit is not None else Budget().rlimit)
    made = decide(ob, solver, budget, cross_check)
    first = made[0]
    decisive = [m.procedure for m in made if m.decisive]
    details: dict[str, Any] = {
        "budget": budget.to_dict(),
        "cross_checked_by": (decisive[1] if len(decisive) > 1 else None) if cross_check else None,
        "solver_version": first.version,
        "procedures": [
            {"name": m.procedure, "status": m.status, "time_ms": round(m.time_ms, 3), **m.stats}
            for m in made
        ],
    }
    ms = (time.perf_counter() - t0) * 1000
    if first.status == UNKNOWN:
        reasons = "; ".join(f"{m.procedure}: {m.reason}" for m in made)
        return Verdict(
            Status.UNKNOWN, ob.policy, ob.hash, first.procedure, ms, reason=reasons, details=details
        )
    if first.status == HOLDS:
        v = Verdict(
            Status.PROVEN, ob.policy, ob.hash, first.procedure, ms, first.max_diff, details=details
        )
    elif not fits_at(ob, first.violation()):
        why = (
            f"{first.procedure} found a violation at {_fmt(first.violation())}, but values there "
            "exceed 64 bits and the concrete replay cannot confirm it"
        )
        return Verdict(
            Status.UNKNOWN, ob.policy, ob.hash, first.procedure, ms, reason=why, details=details
        )
    else:
        cex = replay(ob, first.violation(), lift=lift)
        replaced = False  # by a reachable witness: not the domain's simplest violation
        if lift and ob.lift is not None and cex.lifted_input is None:
            found = _liftable_witness(
                ob, solver, budget, cex.assignment[ob.lift.var], t0 + budget.timeout_s
            )
            if found is None:
                why = _unreachable(ob, cex)
                return Verdict(
                    Status.UNKNOWN,
                    ob.policy,
                    ob.hash,
                    first.procedure,
                    (time.perf_counter() - t0) * 1000,
                    reason=why,
                    details=details,
                )
            cex = found
            replaced = True
        for other in made[1:]:
            if other.status == VIOLATED:  # a cross-checking witness must reproduce as well
                replay(ob, other.violation(), lift=lift)
        details["minimal"] = first.minimal and not replaced
        v = Verdict(
            Status.REFUTED,
            ob.policy,
            ob.hash,
            first.procedure,
            (time.perf_counter() - t0) * 1000,
            first.max_diff,
            cex,
            _refuted_reason(cex),
            details=details,
        )
        if needs_lift(ob, v):
            return v  # stored once lifted (lift_refutation)
    if ps is not None:
        ps.put(ob, v)
    return v


def _refuted_reason(cex: Counterexample) -> str:
    if cex.undefined:
        return f"{_fmt(cex.assignment)}: before={cex.before}, implementation undefined: {cex.undefined}"
    return f"{_fmt(cex.assignment)}: before={cex.before} after={cex.after} (|diff|={cex.diff})"


def _unreachable(ob: Obligation, cex: Counterexample) -> str:
    """Why a refutation whose witnesses no input row reaches is `unknown`."""
    assert ob.lift is not None
    var = ob.lift.var
    return (
        f"every counterexample tried ({var}={cex.assignment[var]} first) is unreachable from "
        f"any {ob.lift.x_type} input row: the {var} interval over-approximates the reachable "
        "values, so the rewrite is neither proven nor refuted"
    )


def needs_lift(ob: Obligation, v: Verdict) -> bool:
    """Whether `v` is a refutation of `ob` decided with `lift=False` whose witness is not
    yet lifted to an input row."""
    return (
        v.status == Status.REFUTED
        and ob.lift is not None
        and v.counterexample is not None
        and v.counterexample.lifted_input is None
        and not v.counterexample.lift_note
    )


def lift_refutation(
    ob: Obligation,
    v: Verdict,
    timeout_s: float = 10.0,
    solver: str = "auto",
    store: ProofStore | str | os.PathLike | None = None,
    rlimit: int | None = None,
) -> Verdict:
    """The verdict `check(ob)` gives, from `v = check(ob, lift=False)`: its witness lifted
    to an input row (another violating value of the lifted variable when that one is
    unreachable, else `unknown`), stored like any decided verdict. `v` itself when it
    needs no lifting."""
    if not needs_lift(ob, v):
        return v
    assert ob.lift is not None and v.counterexample is not None
    t0 = time.perf_counter()
    budget = Budget(timeout_s, rlimit if rlimit is not None else Budget().rlimit)
    details = dict(v.details)
    cex = replay(ob, v.counterexample.assignment)
    if cex.lifted_input is None:
        found = _liftable_witness(
            ob, solver, budget, cex.assignment[ob.lift.var], t0 + budget.timeout_s
        )
        if found is None:
            why = _unreachable(ob, cex)
            ms = v.time_ms + (time.perf_counter() - t0) * 1000
            return Verdict(
                Status.UNKNOWN, ob.policy, ob.hash, v.solver, ms, reason=why, details=details
            )
        cex = found
        details["minimal"] = False  # another witness than the procedure's minimal one
    out = Verdict(
        Status.REFUTED,
        ob.policy,
        ob.hash,
        v.solver,
        v.time_ms + (time.perf_counter() - t0) * 1000,
        v.max_diff,
        cex,
        _refuted_reason(cex),
        details=details,
    )
    ps = _resolve_store(store)
    if ps is not None:
        ps.put(ob, out)
    return out


def _serve(ob: Obligation, ps: ProofStore, rlimit: int | None, t0: float) -> Verdict | None:
    """The stored verdict of `ob` once checked, or None when it must be decided afresh.

    A record is never trusted on its word: a refutation is replayed; a "proven" is
    re-decided within the store's recheck budget, and only when that does not
    finish is it served on a valid signature by the store's key. A record the
    re-decision contradicts raises `StoreCorrupt`; an unverifiable one counts as
    missing (`StoreMiss` in ro mode, decided afresh and rewritten in rw mode).
    """
    rec = ps.lookup(ob)
    if rec is None:
        return None
    cached = rec.verdict
    how: str | None
    reason = cached.reason
    cex = cached.counterexample
    if cex is not None:
        # a stored refutation still reproduces, on its stored input row (checked, not
        # searched); what is reported is what the replay computed, not the record's word
        cex = replay(ob, cex.assignment, row=cex.lifted_input)
        if ob.lift is not None and cex.lifted_input is None:
            if ps.mode == "ro":
                raise StoreMiss(
                    f"proof record {rec.path} holds a refutation no input row reaches: "
                    "treated as missing"
                )
            return None  # check never stores one: decided afresh (another witness or unknown)
        reason = _refuted_reason(cex)
        how = "replayed"
    else:
        how = _recheck_proven(ob, rec, ps, rlimit)
        if how is None:
            return None
    ms = (time.perf_counter() - t0) * 1000
    details = {
        **cached.details,
        "original_time_ms": cached.time_ms,
        "served": how,
        "record": str(rec.path),
    }
    return Verdict(
        cached.status,
        ob.policy,
        ob.hash,
        cached.solver,
        ms,
        cached.max_diff,
        cex,
        reason,
        True,
        details,
    )


def _recheck_proven(
    ob: Obligation, rec: StoredRecord, ps: ProofStore, rlimit: int | None
) -> str | None:
    """How a stored "proven" was checked ("re-decided by P", "signature verified"), or None."""
    budget_s = ps.recheck_budget_s
    if budget_s > 0:
        budget = Budget(budget_s, rlimit if rlimit is not None else Budget().rlimit)
        try:
            d = decide(ob, "auto", budget)[0]
        except ProverError:
            d = None
        if d is not None and d.status == VIOLATED:
            raise StoreCorrupt(
                f"proof record {rec.path} says proven, but {d.procedure} finds the obligation "
                "violated: the record is forged or stale; delete it and re-run the check"
            )
        if d is not None and d.status == HOLDS:
            recorded = rec.verdict.max_diff
            if d.max_diff is not None and recorded is not None and recorded != d.max_diff:
                raise StoreCorrupt(
                    f"proof record {rec.path} records largest difference "
                    f"{rec.verdict.max_diff}, {d.procedure} finds {d.max_diff}"
                )
            return f"re-decided by {d.procedure}"
    if rec.signature == "valid":
        return "signature verified"
    why = {
        "absent": "is unsigned",
        "no key": "is signed but no proof key is configured to verify it",
        "invalid": "has a signature that does not verify with the configured key",
    }[rec.signature]
    if ps.mode == "ro":
        raise StoreMiss(
            f"proof record {rec.path} could not be re-decided within the recheck budget "
            f"({budget_s:g} s) and {why}: treated as missing"
        )
    return None


def _liftable_witness(
    ob: Obligation, solver: str, budget: Budget, bad: int, deadline: float, attempts: int = 12
) -> Counterexample | None:
    """Another violating value of the lifted variable that some input row reaches.

    The accumulator interval over-approximates what input rows can produce (e.g.
    when all weights share a factor); a refutation must be reachable, so the
    range is split around each unreachable witness and searched again, a bounded
    number of times, within what is left of the obligation's own time budget.
    """
    lift = ob.lift
    if lift is None:
        return None
    var = lift.var
    lo, hi = ob.ranges[var]
    pending = _split_reachable(lift, lo, hi, bad)
    while pending and attempts > 0:
        a, b = pending.pop(0)
        if a > b:
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        attempts -= 1
        sub = replace(ob, ranges={**ob.ranges, var: (a, b)})
        try:
            d = decide(sub, solver, Budget(left, budget.rlimit))[0]
        except ProverError:
            continue
        if d.status != VIOLATED:
            continue
        cex = replay(sub, d.violation())
        if cex.lifted_input is not None:
            return cex
        w = cex.assignment[var]
        pending += _split_reachable(lift, a, b, w)
    return None


def _split_reachable(lift: LiftSpec, a: int, b: int, w: int) -> list[tuple[int, int]]:
    """[a, b] without the unreachable `w`, each part trimmed to the nearest value a row can reach.

    Every row gives `bias` modulo g = gcd(w_k - w_zp), so values in between are skipped
    (e.g. a column of equal weights reaches only multiples of that weight).
    """
    g = math.gcd(*(int(v) - lift.w_zp for v in lift.weights))
    if g == 0:
        return []
    below = w - 1 - ((w - 1 - lift.bias) % g)
    above = w + 1 + ((lift.bias - w - 1) % g)
    return [(a, below), (above, b)]


def _fmt(a: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in a.items())
