"""The `alternatives` schedule strategy's pick: fused or the unfused alternative, per site.

Under `alternatives` (`--schedule-strategy`, `compiler.ir.structure` describes all three)
legality does not ask about the scheduling structure; every structurally legal site is
proven first. This pass, between the gate and the rewrite, schedules each proven site's
fused form (the user's map, else the backend scheduler's choice) and keeps it fused only
where the target can generate it in that structure; otherwise the legal unfused
alternative stays, the site is rejected with `grouped_codegen_unsupported` and its proof
(`site.obligations`, `site.obligation_hash`) stays recorded. Other strategies: no change.
"""

from __future__ import annotations

from compiler.ir.graph import Graph
from compiler.ir.strategy import ScheduleStrategy
from compiler.ir.structure import structure_of_site, unsupported
from prover.verdict import ReasonCode, Status


def run(g: Graph, ctx) -> Graph:
    """`alternatives`: pick per proven site, fused where the target can generate it in the
    structure its fused form is scheduled in, else the unfused alternative (the site is
    rejected with `grouped_codegen_unsupported`, not applied, its proof kept)."""
    if ctx.config.schedule_strategy is not ScheduleStrategy.ALTERNATIVES:
        return g
    for site in ctx.state.sites:
        if site.verdict != Status.PROVEN or site.compute.op == "eltwise":
            continue  # the elementwise unit has one structure
        why = unsupported(g, site, ctx, structure_of_site(g, site, ctx))
        if why is None:
            continue
        proof = site.obligation_hash or (site.obligations[0] if site.obligations else "")
        site.decide(
            Status.REJECTED,
            ReasonCode.GROUPED_CODEGEN_UNSUPPORTED,
            f"{why}; the unfused alternative is kept (the fused form was proven: "
            f"obligation {proof[:12]})",
        )
        site.details.append(
            {"schedule_strategy": "alternatives", "kept": "unfused", "proof": proof}
        )
    return g
