"""A site as one `fused` node: the rewrite the gate replays and the rewrite pass applies.

A QLinearAdd bias folded into the accumulator (`ColumnGroup.acc_offset`) becomes part
of the fused node's int32 bias; a post-requantization add stage stays in its epilogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from npu_backend.postprocess import PostProcess
from prover.terms import Var

from .graph import Graph, Node
from .site import Site


def post_of(groups: Sequence[Any], n_cols: int) -> PostProcess | tuple[PostProcess | None, ...]:
    """A single PostProcess when every column shares it, else one per column."""
    if len(groups) == 1:
        return groups[0].post
    per: list[PostProcess | None] = [None] * n_cols
    for grp in groups:
        for j in grp.columns:
            per[j] = grp.post
    return tuple(per)


def _origin(nodes: Sequence[Node]) -> tuple[str, ...]:
    origin: list[str] = []
    for n in nodes:
        origin += [o for o in n.origin if o not in origin]
    return tuple(origin)


def fused_origin(site: Site) -> tuple[str, ...]:
    """The ONNX nodes the site's fused node stands for (compute op, chain, bias constant)."""
    extra = [] if site.float_bias is None else [site.float_bias.const_node]
    return _origin([site.compute, *site.chain, *extra])


def apply_site(
    g: Graph, site: Site, groups: Sequence[Any], structure: str = "plain", prune: bool = True
) -> Node:
    """Replace the site's compute op and chain by one fused node in `g` (nodes looked up by
    name). `prune=False` leaves dropping the dead values to the caller (`g.prune_values()`
    once after many rewrites, instead of once per site)."""
    compute = g.node(site.compute.name)
    chain = [g.node(n.name) for n in site.chain]
    act = chain[-1]
    # the fused node's accumulator range is not the compute op's once a bias is folded in;
    # nothing reads it (a fused node is never proposed or proved again)
    attrs = {k: v for k, v in compute.attrs.items() if k not in ("requant", "acc_range")}
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
        groups=[(grp.columns, grp.post_term(Var("acc"))) for grp in groups],
        post=post_of(groups, n_cols),
        post_function=act.attrs["function"],
        pattern=site.pattern,
        site=site.id,
        structure=structure,
    )
    extra = []
    if site.float_bias is not None:
        extra.append(g.node(site.float_bias.const_node.name))  # the bias's constant DQ
    fused = Node(
        compute.name,
        "fused",
        list(compute.inputs),
        [act.output],
        attrs,
        fused_origin(site),
    )
    pos = g.index(act)
    g.nodes[pos] = fused
    gone = {id(n) for n in [compute, *chain[:-1], *extra]}
    g.nodes = [n for n in g.nodes if id(n) not in gone]
    if prune:
        g.prune_values()
    return fused
