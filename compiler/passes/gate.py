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

from compiler.ir import eltwise_site
from compiler.ir.context import Context
from compiler.ir.float_compute import float_compute_finding
from compiler.ir.fuse import apply_site
from compiler.ir.graph import Graph
from compiler.ir.policy_scope import effective_policy
from compiler.ir.site import Site
from compiler.proving import cex, divergence, fixed_synthesis, prove
from compiler.proving.prove import SiteObligation
from prover.errors import StoreMiss
from prover.obligation import Obligation
from prover.verdict import ReasonCode, Status

# the site's obligations (built once per site; `compiler.report.views` redraws from them)
obligations = prove.site_obligations


def _policy_note(used, asked) -> str:
    """The policy an obligation was decided under (an interior site is held to bitwise)."""
    if used == asked:
        return str(used)
    return f"{used} (the result feeds further ops, so {asked} applies only at graph outputs)"


def _replay_rewrite(ctx: Context):
    """The rewrite a refutation is replayed through (the rewrite pass's own form)."""
    return lambda t, s: apply_site(t, s, s.post, ctx.config.structure_of(s.compute.origin))


def decide_site(g: Graph, site: Site, ctx: Context) -> None:
    """Decide one site: its obligations (built once) through `prove.check`."""
    if site.compute.op == "host_onnx":
        op_name = site.compute.attrs.get("compute") or "MatMul"
        site.decide(
            Status.UNKNOWN,
            ReasonCode.FLOAT_ACCUMULATION,
            f"the QDQ {op_name} group {', '.join(site.compute.origin)} runs as float32 ops on "
            f"the host (reference {ctx.config.reference.name}, QDQ reading "
            f"{getattr(ctx.config.reference, 'qdq_reading', 'float')}): its sum in ONNX Runtime's "
            "float order is not an integer epilogue, so no fusion is proven",
        )
        return
    if eltwise_site.is_eltwise_site(site):
        _decide_eltwise(g, site, ctx)
        return
    if _saturating(site, ctx):
        _decide_saturating(g, site, ctx)
        return
    obs = prove.site_obligations(g, site, ctx)
    # one batch: thresholds prefetched (a family of identities is proven when built)
    prove.decide_all([ob for ob, _, _ in obs if isinstance(ob, Obligation)], ctx)
    verdicts = []
    for ob, cols, lift_col in obs:
        v = prove.check(ob, ctx)
        site.obligations.append(ob.hash)
        verdicts.append((ob, v, cols, lift_col))
        if not isinstance(v, Exception):
            site.time_ms += float(v.time_ms)
    if ctx.config.synthesis:
        verdicts = fixed_synthesis.resynthesise(site, verdicts, ctx, prove.check)
        for ob, v, _, _ in verdicts:  # a proven synthesised group cites its own obligation
            if ob.hash not in site.obligations:
                site.obligations.append(ob.hash)
                site.time_ms += float(v.time_ms)
        if site.verdict is not None:  # rejected: an intermediate type nothing replaced
            return
    before = {ob.hash: v for ob, v, _, _ in verdicts}
    verdicts = prove.lift_reported(verdicts, ctx)
    for ob, v, _, _ in verdicts:  # the lifting time of the reported refutation
        if v is not before[ob.hash] and not isinstance(v, Exception):
            site.time_ms += float(v.time_ms) - float(before[ob.hash].time_ms)
    errors = [(ob, v) for ob, v, _, _ in verdicts if isinstance(v, Exception)]
    refuted = [
        x for x in verdicts if not isinstance(x[1], Exception) and x[1].status == Status.REFUTED
    ]
    unknown = [
        x for x in verdicts if not isinstance(x[1], Exception) and x[1].status == Status.UNKNOWN
    ]
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
            site.decide(
                Status.REFUTED, ReasonCode.REFUTED, f"element correspondence fails: {v.reason}"
            )
            return
        site.counterexample = cex.whole_model(
            g,
            site,
            v,
            cols,
            lift_col,
            ctx,
            _replay_rewrite(ctx),
        )
        site.decide(
            Status.REFUTED,
            ReasonCode.REFUTED,
            f"columns {cols[0]}..{cols[-1]}: {v.reason} under {_policy_note(ob.policy, ctx.config.policy)}"
            + fixed_synthesis.refuted_note(site, cols),
        )
        return
    first = verdicts[0]
    site.obligation_hash, site.solver = first[0].hash, getattr(first[1], "solver", None)
    if errors and all(isinstance(e, StoreMiss) for _, e in errors):  # the ro gate's miss
        site.decide(Status.UNKNOWN, ReasonCode.PROOF_MISSING, str(errors[0][1]))
    elif errors:
        site.decide(Status.UNKNOWN, ReasonCode.UNKNOWN, f"prover error: {errors[0][1]}")
    elif unknown:
        site.decide(Status.UNKNOWN, ReasonCode.UNKNOWN, unknown[0][1].reason or "budget exhausted")
    else:
        site.decide(Status.PROVEN)


def _decide_eltwise(g: Graph, site: Site, ctx: Context) -> None:
    """A two-activation op -> table site: one obligation over every operand pair."""
    policy = effective_policy(g, site.activation.output, ctx.config.policy)
    ob = eltwise_site.obligation(site, ctx.config.target, policy)
    v = prove.check(ob, ctx)
    site.obligations.append(ob.hash)
    site.obligation_hash = ob.hash
    if isinstance(v, Exception):
        site.decide(Status.UNKNOWN, ReasonCode.UNKNOWN, f"prover error: {v}")
        return
    site.time_ms += float(v.time_ms)
    site.solver, site.max_diff = v.solver, v.max_diff
    if v.status == Status.PROVEN:
        site.decide(Status.PROVEN)
    elif v.status == Status.REFUTED:
        site.decide(
            Status.REFUTED,
            ReasonCode.REFUTED,
            f"operands {v.reason} under {_policy_note(ob.policy, ctx.config.policy)}",
        )
    else:
        site.decide(Status.UNKNOWN, ReasonCode.UNKNOWN, v.reason or "budget exhausted")


def _decide_saturating(g: Graph, site: Site, ctx: Context) -> None:
    """Under a pair-saturating reference, a site whose u8s8 pairs can saturate is refuted
    with a replayed input where the outputs differ (the NPU sums exactly), else unknown."""
    cols = divergence.saturable_columns(site.compute)
    what = (
        f"under reference {ctx.config.reference.name} uint8 x int8 pairs saturate int16 in "
        f"{len(cols)} column(s) (first {cols[0]}) while the NPU accumulates exactly"
    )
    if site.compute.attrs.get("window") is not None:
        site.decide(
            Status.UNKNOWN,
            ReasonCode.REFERENCE_DIVERGENCE,
            f"{what}; {divergence.CONV_PAIR_ORDER}; {divergence.REMEDY}",
        )
        return
    policy = effective_policy(g, site.activation.output, ctx.config.policy)
    found = divergence.site_witness(site, policy.bound)
    if found is None:
        site.decide(
            Status.UNKNOWN,
            ReasonCode.REFERENCE_DIVERGENCE,
            f"{what}; no input found where the outputs differ beyond {policy}; "
            f"{divergence.remedy(g, site.compute)}",
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
        _replay_rewrite(ctx),
    )
    site.decide(
        Status.REFUTED,
        ReasonCode.REFUTED,
        f"{what}: column {j} accumulates {sat} in the reference and {exact} on the NPU "
        f"(outputs {before} vs {after}); {divergence.remedy(g, site.compute)}",
    )


def _host_profile_or_none():
    from compiler.ort.reference_host import host_profile

    try:
        return host_profile()
    except Exception:  # noqa: BLE001 - the finding then says "unknown on this host"
        return None


def _saturating(site: Site, ctx: Context) -> bool:
    """Whether the reference saturates u8s8 pairs that this site's columns can reach."""
    return bool(
        divergence.saturating_reference(ctx.config.reference)
        and divergence.saturable_columns(site.compute)
    )


def _decidable(site: Site, ctx: Context) -> bool:
    """Whether the site's verdict comes from its epilogue obligations."""
    return site.compute.op not in ("host_onnx", "eltwise") and not _saturating(site, ctx)


def run(g: Graph, ctx: Context) -> Graph:
    st = ctx.state
    findings = []
    if any(
        divergence.saturable_columns(n) if n.op == "matmul" else divergence.act_saturable(n)
        for n in g.nodes
    ):
        findings = divergence.findings(g, ctx.config.reference, _host_profile_or_none())
    floats = float_compute_finding(g)  # a float model is loud for every caller, not only a CLI
    st.findings = findings + ([floats] if floats is not None else [])
    pending = [s for s in st.sites if s.verdict is None]
    if ctx.config.jobs > 1:  # every site's obligations at once, so workers get enough work
        obs: list[SiteObligation] = []
        for s in pending:
            if _decidable(s, ctx):
                obs += prove.site_obligations(g, s, ctx)
        prove.decide_all([ob for ob, _, _ in obs if isinstance(ob, Obligation)], ctx)
    for i, site in enumerate(pending):
        decide_site(g, site, ctx)
        if ctx.config.progress is not None:
            ctx.config.progress(i + 1, len(pending))
    return g
