"""Rewrite: replace each proven site by one `fused` node (and nothing else).

A QLinearAdd bias folded into the accumulator (`ColumnGroup.acc_offset`) becomes part
of the fused node's int32 bias; a post-requantization add stage stays in its epilogue.

Proven sites are applied longest chain first; a site overlapping an applied one is
left as superseded. Rejected, refuted and unknown sites leave the graph as it was.
"""

from __future__ import annotations

from compiler.ir.graph import Graph, Node
from compiler.ir.site import Site
from npu_backend.postprocess import PostProcess
from prover.terms import Var


def post_of(groups, n_cols: int):
    """A single PostProcess when every column shares it, else one per column."""
    if len(groups) == 1:
        return groups[0].post
    per: list[PostProcess | None] = [None] * n_cols
    for grp in groups:
        for j in grp.columns:
            per[j] = grp.post
    return tuple(per)


def apply_site(g: Graph, site: Site, groups, structure: str = "plain") -> Node:
    """Replace the site's compute op and chain by one fused node in `g` (nodes looked up by name)."""
    compute = g.node(site.compute.name)
    chain = [g.node(n.name) for n in site.chain]
    act = chain[-1]
    attrs = {k: v for k, v in compute.attrs.items() if k != "requant"}
    n_cols = compute.attrs["w"].shape[1]
    offsets = [0] * n_cols
    for grp in groups:
        for j in grp.columns:
            offsets[j] = int(grp.acc_offset)
    if any(offsets):
        # a QLinearAdd bias folded into the accumulator: the NPU adds it with the int32 bias
        bias = compute.attrs.get("bias") or (0,) * n_cols
        attrs["bias"] = tuple(int(b) + o for b, o in zip(bias, offsets, strict=True))
    attrs.update(
        groups=[(grp.columns, grp.post.epilogue_term(Var("acc"))) for grp in groups],
        post=post_of(groups, compute.attrs["w"].shape[1]),
        post_function=act.attrs["function"],
        pattern=site.pattern,
        site=site.id,
        structure=structure,
    )
    extra = []
    if site.float_bias is not None:
        extra.append(g.node(site.float_bias.const_node.name))  # the bias's constant DQ
    origin: list[str] = []
    for n in [compute, *chain, *extra]:
        origin += [o for o in n.origin if o not in origin]
    fused = Node(compute.name, "fused", list(compute.inputs), [act.output], attrs, tuple(origin))
    pos = g.index(act)
    g.nodes[pos] = fused
    g.remove([compute, *chain[:-1], *extra])
    return fused


def run(g: Graph, ctx) -> Graph:
    proven = [s for s in ctx.sites if s.verdict == "proven"]
    proven.sort(key=lambda s: (-len(s.chain), int(s.id.split("-")[1])))
    taken: set[str] = set()
    for s in proven:
        names = {s.compute.name, *(n.name for n in s.chain)}
        if names & taken:
            s.details.append({"superseded": "an overlapping proven site was applied"})
            continue
        apply_site(g, s, s.post, ctx.structure_of(s.compute.origin))
        s.applied = True
        taken |= names
    return g
