"""Rewrite: replace each proven site by one `fused` node (and nothing else).

The fused node's form is `compiler.ir.fuse.apply_site` (the gate replays the same
rewrite for a refutation). Proven sites are applied longest chain first; a site
overlapping an applied one is left as superseded. Rejected, refuted and unknown sites
leave the graph as it was.
"""

from __future__ import annotations

from compiler.ir import eltwise_site
from compiler.ir.context import Context
from compiler.ir.fuse import apply_site
from compiler.ir.graph import Graph
from compiler.ir.structure import structure_of_site
from prover.verdict import Status


def run(g: Graph, ctx: Context) -> Graph:
    proven = [s for s in ctx.state.sites if s.verdict == Status.PROVEN]
    proven.sort(key=lambda s: (-len(s.chain), int(s.id.split("-")[1])))
    taken: set[str] = set()
    for s in proven:
        names = {s.compute.name, *(n.name for n in s.chain)}
        if names & taken:
            s.details.append({"superseded": "an overlapping proven site was applied"})
            continue
        if eltwise_site.is_eltwise_site(s):
            eltwise_site.apply(g, s)
        else:
            apply_site(g, s, s.post, structure_of_site(g, s, ctx), prune=False)
        s.applied = True
        taken |= names
    if taken:
        g.prune_values()
    return g
