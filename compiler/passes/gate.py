"""Semantic gate: every structurally legal site is decided by the prover.

The matmul core is shared by construction (the fused node keeps the same input,
weights, zero points and exact int32 accumulation), so only the per-element
epilogue is proved: over `acc` in the exact per-column accumulator range, one
obligation per group of columns with identical parameters and connected ranges
(identical obligations are decided once, by hash). Leading-unit-dim layout
changes add an index-map obligation. Refuted: lifted and replayed on the whole
model. Unknown is never a pass.
"""

from __future__ import annotations

import numpy as np

from compiler.ir.layout import index_map_terms
from compiler.ir.policy_scope import effective_policy
from compiler.ir.site import Site
from prover.api import ProverError, check
from prover.errors import ReplayMismatch, SolverDisagreement, StoreCorrupt
from prover.inttypes import int_type
from prover.matmul import accumulator_range
from prover.obligation import Obligation
from prover.parallel import check_many
from prover.policy import Policy

from . import cex, divergence, fixed_synthesis
from .rewrite import apply_site


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


def _check(ob: Obligation, ctx):
    if ob.hash in ctx.verdicts:
        return ctx.verdicts[ob.hash]
    try:
        v = check(
            ob,
            timeout_s=ctx.timeout_s,
            solver=ctx.solver,
            store=ctx.store,
            cross_check=ctx.cross_check,
        )
    except (SolverDisagreement, ReplayMismatch, StoreCorrupt):
        raise  # loud: a tool bug or a tampered store; a StoreMiss (ro) becomes `unknown`
    except ProverError as e:
        v = e
    ctx.verdicts[ob.hash] = v
    return v


def obligations(g, site: Site, ctx) -> list[tuple[Obligation, tuple[int, ...], int]]:
    """(obligation, columns, lift column) for every epilogue group, plus an index map if needed."""
    c = site.compute
    a = c.attrs
    w_zp = np.asarray(a["w_zp"], dtype=np.int64)
    r = accumulator_range(a["w"], w_zp, int_type(a["a_type"]), int(a["a_zp"]), a["bias"])
    out = []
    policy = effective_policy(g, site.activation.output, ctx.policy)
    for grp in site.post:
        after = grp.after(_acc())
        for cols, lo, hi in components(grp.columns, r.lo, r.hi):
            lift_col = max(cols, key=lambda j: r.hi[j] - r.lo[j])
            ob = Obligation(
                "epilogue",
                grp.before,
                after,
                {"acc": (lo, hi)},
                policy,
                cex.lift_spec(c, lift_col),
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


def _policy_note(used, asked) -> str:
    """The policy an obligation was decided under (an interior site is held to bitwise)."""
    if used == asked:
        return str(used)
    return f"{used} (the result feeds further ops, so {asked} applies only at graph outputs)"


def _acc():
    from prover.terms import Var

    return Var("acc")


def decide_site(g, site: Site, ctx) -> None:
    if site.compute.op == "host_onnx":
        op_name = site.compute.attrs.get("compute") or "MatMul"
        site.decide(
            "unknown",
            "float_accumulation",
            f"the QDQ {op_name} group {', '.join(site.compute.origin)} runs as float32 ops on "
            f"the host (reference {ctx.reference.name}, QDQ reading "
            f"{getattr(ctx.reference, 'qdq_reading', 'float')}): its sum in ONNX Runtime's "
            "float order is not an integer epilogue, so no fusion is proven",
        )
        return
    if divergence.saturating_reference(ctx.reference) and divergence.saturable_columns(
        site.compute
    ):
        _decide_saturating(g, site, ctx)
        return
    obs = obligations(g, site, ctx)
    verdicts = []
    for ob, cols, lift_col in obs:
        v = _check(ob, ctx)
        site.obligations.append(ob.hash)
        verdicts.append((ob, v, cols, lift_col))
        if not isinstance(v, Exception):
            site.time_ms += float(v.time_ms)
    if ctx.synthesis:
        verdicts = fixed_synthesis.resynthesise(site, verdicts, ctx, _check)
        for ob, v, _, _ in verdicts:  # a proven synthesised group cites its own obligation
            if ob.hash not in site.obligations:
                site.obligations.append(ob.hash)
                site.time_ms += float(v.time_ms)
    errors = [(ob, v) for ob, v, _, _ in verdicts if isinstance(v, Exception)]
    refuted = [x for x in verdicts if not isinstance(x[1], Exception) and x[1].status == "refuted"]
    unknown = [x for x in verdicts if not isinstance(x[1], Exception) and x[1].status == "unknown"]
    diffs = [
        v.max_diff
        for _, v, _, _ in verdicts
        if not isinstance(v, Exception) and v.max_diff is not None
    ]
    site.max_diff = max(diffs) if diffs else None
    if refuted:
        ob, v, cols, lift_col = refuted[0]
        site.obligation_hash, site.solver = ob.hash, v.solver
        if ob.kind == "index_map":
            site.decide("refuted", "refuted", f"element correspondence fails: {v.reason}")
            return
        site.counterexample = cex.whole_model(
            g,
            site,
            v,
            cols,
            lift_col,
            ctx,
            lambda t, s: apply_site(t, s, s.post, ctx.structure_of(s.compute.origin)),
        )
        site.decide(
            "refuted",
            "refuted",
            f"columns {cols[0]}..{cols[-1]}: {v.reason} under {_policy_note(ob.policy, ctx.policy)}"
            + fixed_synthesis.refuted_note(site, cols),
        )
        return
    first = verdicts[0]
    site.obligation_hash, site.solver = first[0].hash, getattr(first[1], "solver", None)
    if errors:
        site.decide("unknown", "unknown", f"prover error: {errors[0][1]}")
    elif unknown:
        site.decide("unknown", "unknown", unknown[0][1].reason or "budget exhausted")
    else:
        site.decide("proven")


def _decide_saturating(g, site: Site, ctx) -> None:
    """Under a pair-saturating reference, a site whose u8s8 pairs can saturate is refuted
    with a replayed input where the outputs differ (the NPU sums exactly), else unknown."""
    cols = divergence.saturable_columns(site.compute)
    policy = effective_policy(g, site.activation.output, ctx.policy)
    found = divergence.site_witness(site, policy.bound)
    what = (
        f"under reference {ctx.reference.name} uint8 x int8 pairs saturate int16 in "
        f"{len(cols)} column(s) (first {cols[0]}) while the NPU accumulates exactly"
    )
    if found is None:
        site.decide(
            "unknown",
            "reference_divergence",
            f"{what}; no input found where the outputs differ beyond {policy}; {divergence.REMEDY}",
        )
        return
    j, row, exact, sat, before, after = found
    site.counterexample = cex.replay_row(
        g,
        site,
        j,
        row,
        {"acc": exact, "acc_reference": sat},
        before,
        after,
        ctx,
        lambda t, s: apply_site(t, s, s.post, ctx.structure_of(s.compute.origin)),
    )
    site.decide(
        "refuted",
        "refuted",
        f"{what}: column {j} accumulates {sat} in the reference and {exact} on the NPU "
        f"(outputs {before} vs {after}); {divergence.REMEDY}",
    )


def _host_profile_or_none():
    from compiler.ort.reference_host import host_profile

    try:
        return host_profile()
    except Exception:  # noqa: BLE001 - the finding then says "unknown on this host"
        return None


def _prefetch(g, sites: list[Site], ctx) -> None:
    """Decide every site's obligations up front in `ctx.jobs` processes (cached by hash)."""
    todo: dict[str, Obligation] = {}
    for site in sites:
        if site.compute.op == "host_onnx":
            continue
        if divergence.saturating_reference(ctx.reference) and divergence.saturable_columns(
            site.compute
        ):
            continue
        for ob, _, _ in obligations(g, site, ctx):
            if ob.hash not in ctx.verdicts:
                todo.setdefault(ob.hash, ob)
    results = check_many(
        list(todo.values()),
        ctx.jobs,
        timeout_s=ctx.timeout_s,
        solver=ctx.solver,
        store=ctx.store,
        cross_check=ctx.cross_check,
    )
    for h, v in zip(todo, results, strict=True):
        if isinstance(v, SolverDisagreement | ReplayMismatch | StoreCorrupt):
            raise v
        ctx.verdicts[h] = v


def run(g, ctx):
    if any(divergence.saturable_columns(n) for n in g.nodes if n.op == "matmul"):
        ctx.findings = divergence.findings(g, ctx.reference, _host_profile_or_none())
    pending = [s for s in ctx.sites if s.verdict is None]
    if ctx.jobs > 1:
        _prefetch(g, pending, ctx)
    for i, site in enumerate(pending):
        decide_site(g, site, ctx)
        if ctx.progress is not None:
            ctx.progress(i + 1, len(pending))
    return g
