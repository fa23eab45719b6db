"""Proving, behind one small module the passes call: build obligations, decide them.

- `site_obligations`: a site's epilogue obligations (one per group of columns with
  identical parameters and connected accumulator ranges) plus an index map for leading
  unit dims; built once per site and kept in the pipeline state.
- `check`: one obligation decided (store lookup, then the decision procedures) through
  `prover.api.check`, once per hash per run (`state.verdicts`).
- `decide_all`: many obligations at once, their float-requantizer thresholds prefetched
  in one vectorised pass (`prefetch`); shared with worker processes when they were started
  early (`start_workers`), else only when the work measured on the first ones says they
  pay for starting them (`prover.parallel`).
- `lift_reported`: refutations are decided without lifting their witness to an input
  row; only the one a site reports is lifted (and stored), in obligation order.
- `identities`: the members of a column family (`prover.family`) that are identities,
  proven together without a solver; the rest are decided one by one as before.
- `COUNTS`: how many obligations this process decided ("decided"), served from the
  proof store ("served"; "redecided" of those were re-decided by the trust model),
  failed on ("errors") and lifted ("lifted"), and how many family members were proven
  as identities ("identities"), so tests can check that a warm run decides and lifts
  nothing (counted, not timed).

A helper, not a pass: gate, lower and fixed_synthesis call it; it imports no pass.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ir.accumulator import acc_range
from compiler.ir.context import Context
from compiler.ir.graph import Graph
from compiler.ir.layout import index_map_terms
from compiler.ir.policy_scope import effective_policy
from compiler.ir.site import Site
from compiler.phases import phase
from compiler.proving.cex import lift_spec
from compiler.proving.families import site_family
from prover.family import Family
from prover.obligation import Obligation
from prover.policy import Policy
from prover.terms import Var
from prover.verdict import Status, Verdict

# (obligation, columns, lift column); a family of identities (`identities`) has no lift column
SiteObligation = tuple[Obligation | Family, tuple[int, ...], int]

COUNTS: Counter[str] = Counter()

# Workers not started early (`start_workers`): in-process decisions first; workers only
# once the work measured so far says the rest outlasts a worker's start, from spawn to
# ready (`prover.parallel.wait_ready`): 0.15 s idle, up to 0.45 s on the loaded 2-core dev
# machine. This process never waits for one, so starting it late costs only its own CPU.
SAMPLE_S = 0.25
WORKER_START_S = 0.25
# Workers are started early (`start_workers`) for models with at least this many epilogue
# obligations (~0.3 ms each: below, the batch is over before a worker is ready, and a
# worker's start-up only costs CPU on a loaded machine)
EARLY_START_OBLIGATIONS = 512
# solvers whose first procedure is `segments` (the one that reads prefetched thresholds)
PREFETCHING_SOLVERS = frozenset({"auto", "segments"})


def components(cols, lo, hi) -> list[tuple[tuple[int, ...], int, int]]:
    """Columns split into groups whose accumulator intervals form one connected range."""
    order = sorted(cols, key=lambda j: (lo[j], hi[j]))
    out: list[list] = []
    for j in order:
        if out and lo[j] <= out[-1][2] + 1:
            out[-1][0].append(j)
            out[-1][2] = max(out[-1][2], hi[j])
        else:
            out.append([[j], lo[j], hi[j]])
    return [(tuple(sorted(c)), a, b) for c, a, b in out]


def site_obligations(g: Graph, site: Site, ctx: Context) -> list[SiteObligation]:
    """(obligation, columns, lift column) for every epilogue group, plus an index map if
    needed; built on first use and kept in `ctx.state.obligations`."""
    # Keyed by the objects themselves (kept alive in the cache, so an id cannot be reused by a
    # new object): synthesis may replace or split the groups later.
    key = (site, *site.post)
    cached = ctx.state.obligations.get(site.id)
    if cached is not None and len(cached[0]) == len(key):
        if all(a is b for a, b in zip(cached[0], key, strict=True)):
            return cached[1]
    out = _build(g, site, ctx)
    ctx.state.obligations[site.id] = (key, out)
    return out


def _build(g: Graph, site: Site, ctx: Context) -> list[SiteObligation]:
    c = site.compute
    r = acc_range(c)
    out: list[SiteObligation] = []
    policy = effective_policy(g, site.activation.output, ctx.config.policy)
    fam: Family | None = None
    covered: set[int] = set()
    found = site_family(site, r, policy)
    if found is not None and not _synthesising(site, ctx) and identities(found[0], ctx).all():
        fam, covered = found
        out.append((fam, tuple(fam.columns.tolist()), -1))
    for gi, grp in enumerate(site.post):
        if gi in covered:
            continue
        after = grp.after(Var("acc"))
        for cols, lo, hi in components(grp.columns, r.lo, r.hi):
            lift_col = max(cols, key=lambda j: r.hi[j] - r.lo[j])
            ob = Obligation(
                "epilogue",
                grp.before,
                after,
                {"acc": (lo, hi)},
                policy,
                lift_spec(c, lift_col),
                note=f"{site.id} {site.pattern} columns {cols[0]}..{cols[-1]}",
            )
            out.append((ob, cols, lift_col))
    layout = [n for n in site.chain if n.op in ("reshape", "transpose")]
    if layout:
        before, after, size = index_map_terms(g, g.values[c.output].shape, layout)
        ob = Obligation(
            "index_map",
            before,
            after,
            {"f": (0, size - 1)},
            Policy(0),
            None,
            note=f"{site.id} element correspondence",
        )
        out.append((ob, (), -1))
        site.index_map = True
    return out


def _synthesising(site: Site, ctx: Context) -> bool:
    """Whether fixed-point synthesis may replace the site's groups (it reads each group's
    own obligation: no family then)."""
    from compiler.ir.npu_step import compute_kind

    caps = ctx.config.target.compute(compute_kind(site.compute))
    return ctx.config.synthesis and caps is not None and bool(caps.synthesis)


def _options(ctx: Context) -> dict[str, Any]:
    o = ctx.config.check
    return {
        "timeout_s": o.timeout_s,
        "solver": o.solver,
        "store": o.store,
        "cross_check": o.cross_check,
        "lift": False,  # only the counterexample a site reports is lifted (`lift_reported`)
    }


def _loud(v: Any) -> Any:
    """A tool bug or a tampered store is raised; other prover errors become the verdict
    (a StoreMiss in ro mode: `unknown`)."""
    from prover.errors import ReplayMismatch, SolverDisagreement, StoreCorrupt

    if isinstance(v, SolverDisagreement | ReplayMismatch | StoreCorrupt):
        raise v
    return v


def provisional(ob: Obligation) -> Verdict:
    """The stand-in answer of a deferred obligation (`CheckOptions.defer`): `proven`, so a
    collecting run goes on the way most runs go and asks for what follows a proof (the
    lowering's obligations); a run that deferred anything is discarded, never reported."""
    return Verdict(
        Status.PROVEN, ob.policy, ob.hash, "deferred", 0.0, reason="deferred", details={}
    )


def check(ob: Obligation | Family, ctx: Context) -> Any:
    """The verdict of `ob` (or the `ProverError` deciding it raised), decided once per run;
    taken from `CheckOptions.known` if there, else deferred if `CheckOptions.defer`. A
    family is one of identities (`identities`), proven as one."""
    verdicts = ctx.state.verdicts
    if ob.hash in verdicts:
        return verdicts[ob.hash]
    if isinstance(ob, Family):
        if not identities(ob, ctx).all() or ob.hash not in verdicts:
            from prover.api import ProverError

            return ProverError(f"family {ob.hash[:12]} is no longer all identities")
        return verdicts[ob.hash]
    o = ctx.config.check
    if o.known is not None and ob.hash in o.known:
        v = o.known[ob.hash]
        verdicts[ob.hash] = v
        return _loud(v) if isinstance(v, Exception) else v
    if o.defer is not None:
        o.defer[ob.hash] = ob
        verdicts[ob.hash] = v = provisional(ob)
        return v
    from prover.api import ProverError
    from prover.api import check as decide

    try:
        with phase("prove"):
            v = decide(ob, **_options(ctx))
    except ProverError as e:
        v = _loud(e)
    _count(v)
    verdicts[ob.hash] = v
    return v


def _count(v: Any) -> None:
    if isinstance(v, Exception):  # a StoreMiss, a timeout: neither decided nor served
        COUNTS["errors"] += 1
    elif not v.cached:
        COUNTS["decided"] += 1
    else:  # a stored "proven" re-decided within the recheck budget is a decision too
        COUNTS["served"] += 1
        if str(v.details.get("served", "")).startswith("re-decided"):
            COUNTS["redecided"] += 1


def identities(fam: Family, ctx: Context) -> np.ndarray:
    """The members of `fam` proven as identities (a boolean array; `prover.family`), their
    one verdict kept under the identities' family hash (and in the store). None are when
    the user named a procedure or asked for a cross-check: each member is then decided by
    it, as before."""
    o = ctx.config.check
    if o.solver != "auto" or o.cross_check:
        return np.zeros(len(fam), dtype=bool)
    from prover.family import prove_identities

    same, v = prove_identities(fam, o.store)
    if v is not None:
        ctx.state.verdicts[v.obligation_hash] = v
        COUNTS["identities"] += int(same.sum())
        if v.cached:
            COUNTS["served"] += 1
    return same


def workers_pay(per_s: float, rest: int, jobs: int) -> bool:
    """Whether `rest` obligations at `per_s` seconds each finish sooner with `jobs - 1`
    workers started now (`WORKER_START_S`, in parallel) than all decided here."""
    return jobs > 1 and per_s * rest * (1 - 1 / jobs) > WORKER_START_S


def prefetch(obligations: Sequence[Obligation], ctx: Context) -> int:
    """Let `segments` compute the float-requantizer thresholds of a batch's epilogue and
    lowering obligations in one vectorised pass (`prover.segments.prefetch`); returns the
    chains cached. Only worth it for two or more that `segments` will decide; verdicts do
    not depend on it."""
    if ctx.config.check.solver not in PREFETCHING_SOLVERS:
        return 0
    from prover.reflexive import identical

    # sides that are the same terms need no thresholds (`segments` decides them at once)
    epilogues = [
        ob for ob in obligations if ob.kind in ("epilogue", "lowering") and not identical(ob)
    ]
    if len(epilogues) < 2:
        return 0
    from prover.segments import prefetch as seg_prefetch
    from prover.segments_many import decide_many

    with phase("prove"):
        done = seg_prefetch(epilogues)
        decide_many(epilogues)
    return done


def expected_obligations(g: Graph, ctx: Context | None = None) -> int:
    """A cheap estimate, from the IR the frontend built, of how many epilogue obligations
    the gate will decide: one per distinct requantization scale of each compute node; one
    per node whose columns `identities` will likely prove as a family (with `ctx`: no
    procedure named, and the node's unit requantizes in float32, as the model does)."""
    n = 0
    for node in g.nodes:
        rq = node.attrs.get("requant")
        if isinstance(rq, dict):
            scale = rq.get("scale")
            if not isinstance(scale, tuple | list) or _family_likely(node, rq, ctx):
                n += 1
            else:
                n += len(set(scale))
    return n


def _family_likely(node: Any, rq: dict, ctx: Context | None) -> bool:
    if ctx is None or ctx.config.check.solver != "auto" or ctx.config.check.cross_check:
        return False
    from compiler.ir.npu_step import compute_kind

    caps = ctx.config.target.compute(compute_kind(node))
    return rq.get("scheme") == "float" and caps is not None and caps.requant_scheme == "float32"


def start_workers(jobs: int, g: Graph, ctx: Context | None = None) -> None:
    """Start the `jobs - 1` worker processes now, without waiting for them, if the model
    has enough work for them (`EARLY_START_OBLIGATIONS`, `expected_obligations`): a caller
    that will decide its obligations starts them early so their start-up overlaps its own
    work."""
    if jobs > 1 and expected_obligations(g, ctx) >= EARLY_START_OBLIGATIONS:
        from prover.parallel import start

        start(jobs - 1)


def decide_all(obligations: Sequence[Obligation], ctx: Context) -> None:
    """Decide every obligation not yet decided (results in `ctx.state.verdicts`).

    With `jobs > 1` and workers already started (`start_workers`), the batch is shared
    with them (`prover.parallel.check_many`: this process never waits for one that is
    still starting). Without, obligations are decided here until `SAMPLE_S` has passed;
    the rest goes to workers started then only if, at the rate measured, it would take
    longer than starting them. Verdicts do not depend on where an obligation was decided.
    """
    with phase("prove"):
        _decide_all(obligations, ctx)


def _decide_all(obligations: Sequence[Obligation], ctx: Context) -> None:
    todo = list({ob.hash: ob for ob in obligations if ob.hash not in ctx.state.verdicts}.values())
    o = ctx.config.check
    if o.defer is not None or o.known is not None:  # decided elsewhere (a zoo), or to be
        known = o.known or {}
        for ob in todo:
            if o.defer is not None or ob.hash in known:
                check(ob, ctx)
        todo = [ob for ob in todo if ob.hash not in ctx.state.verdicts]
    jobs = ctx.config.jobs
    if jobs > 1 and len(todo) > 1:
        from prover import parallel

        rest = todo
        if parallel.running() != jobs - 1:
            prefetch(todo, ctx)
            t0 = time.perf_counter()
            done = 0
            while done < len(todo) and (not done or time.perf_counter() - t0 < SAMPLE_S):
                check(todo[done], ctx)
                done += 1
            rest = todo[done:]
            if not workers_pay((time.perf_counter() - t0) / done, len(rest), jobs):
                for ob in rest:
                    check(ob, ctx)
                return
        for ob, v in zip(rest, _share(rest, jobs, ctx), strict=True):
            _count(v)
            ctx.state.verdicts[ob.hash] = _loud(v)
        return
    prefetch(todo, ctx)
    for ob in todo:
        check(ob, ctx)


def _share(obligations: list[Obligation], jobs: int, ctx: Context) -> list[Any]:
    from prover.parallel import check_many

    pre = ctx.config.check.solver in PREFETCHING_SOLVERS
    return check_many(obligations, jobs, prefetch=pre, **_options(ctx))


def lift_reported(verdicts: list[tuple[Any, Any, Any, Any]], ctx: Context) -> list:
    """`verdicts` ((obligation, verdict, columns, lift column), in order) with the first
    refutation lifted to an input row, as `prover.api.check` would have returned it; one
    whose witness no row reaches becomes `unknown` and the next is lifted. The rest keep
    their unlifted witnesses (never reported)."""
    from prover.api import lift_refutation, needs_lift

    out = list(verdicts)
    for i, (ob, v, cols, lift_col) in enumerate(out):
        if isinstance(v, Exception) or v.status != Status.REFUTED:
            continue
        if needs_lift(ob, v):
            o = _options(ctx)
            v = lift_refutation(
                ob, v, timeout_s=o["timeout_s"], solver=o["solver"], store=o["store"]
            )
            COUNTS["lifted"] += 1
            ctx.state.verdicts[ob.hash] = v
            out[i] = (ob, v, cols, lift_col)
        if v.status == Status.REFUTED:
            break
    return out
