"""Fusion proposal: every activation table reachable backwards from a compute op.

From each `lut` node (a unary region is one: `compiler.frontend.ops.unary_region`), and
from the first node of a region the frontend refused (`region_refusal`), walk back through ops with one varying input (requantize, a
QLinearAdd bias with a constant operand, clip, layout ops, other tables, a float bias
Add whose other operand is constant, and anything else) to the nearest compute op: an integer
`matmul` or a QDQ float MatMul/Gemm kept as a host group. Every walk that reaches one
is a candidate site; structural legality then decides what the ops in between
mean for it (this pass only proposes).
"""

from __future__ import annotations

from compiler.ir.context import Context
from compiler.ir.graph import Graph, Node
from compiler.ir.site import Site

MAX_CHAIN = 8


def is_compute(n: Node) -> bool:
    """A compute op a table after it may fuse into: an integer matmul (or conv), a QDQ
    float compute group, or a two-activation QLinearAdd/QLinearMul (`eltwise`)."""
    return n.op in ("matmul", "fused", "eltwise") or (
        n.op == "host_onnx" and bool(n.attrs.get("compute"))
    )


def varying_inputs(g: Graph, n: Node) -> list[str]:
    """Inputs of `n` that depend on graph inputs (a constant operand, e.g. a bias
    DequantizeLinear of an initializer, does not): the walk follows a single one."""

    def constant(v: str, depth: int = 0) -> bool:
        p = g.producer(v)
        if p is None:
            return v not in g.inputs
        return depth < MAX_CHAIN and all(constant(i, depth + 1) for i in p.inputs)

    return [v for v in n.inputs if not constant(v)]


def pattern_of(compute: Node, chain: list[Node]) -> str:
    parts = [
        "matmul"
        if compute.attrs.get("kind", compute.attrs.get("compute")) in ("MatMul", None)
        else str(compute.attrs.get("kind", compute.attrs.get("compute"))).lower()
    ]
    if compute.op == "eltwise":
        parts = [str(compute.attrs["binary"]).lower()]
    for n in chain:
        if n.attrs.get("region_refusal") is not None:
            parts.append("region")
        elif n.op == "lut":
            parts.append(n.attrs["function"])
        elif n.op in ("requantize", "clip"):
            parts.append(n.op)
        elif n.op == "qlinear_binary":
            parts.append(str(n.attrs.get("binary", "qlinear_binary")).lower())
        elif n.op in ("reshape", "transpose"):
            parts.append(n.op)
        elif n.op == "host_onnx":
            parts.append(str(n.attrs.get("onnx_op", "host")).lower())
    return "+".join(parts)


def run(g: Graph, ctx: Context) -> Graph:
    """Record candidate sites in the state (ids in topological order of the activation)."""
    sites: list[Site] = []
    refused: list[Site] = []
    for n in g.nodes:
        # a table, or the first node of a unary region refused in the frontend (its
        # site is rejected with the region's reason: compiler.passes.legality)
        if n.op != "lut" and n.attrs.get("region_refusal") is None:
            continue
        chain = [n]
        cur = n.inputs[0]
        while len(chain) <= MAX_CHAIN:
            p = g.producer(cur)
            if p is None:
                break
            if is_compute(p):
                if p.op == "fused" or p.attrs.get("post_lut") is not None:
                    break  # already fused by an earlier run: nothing new to propose
                site = Site(id="", pattern=pattern_of(p, chain), compute=p, chain=chain)
                (sites if n.op == "lut" else refused).append(site)
                break
            varying = varying_inputs(g, p)
            if len(varying) != 1:
                break
            chain.insert(0, p)
            cur = varying[0]
    # a refused region is its own site unless a table's chain already runs through it
    # (e.g. a per-column float bias group before an activation: that site says why)
    covered = {id(x) for s in sites for x in s.chain}
    sites += [s for s in refused if id(s.activation) not in covered]
    sites.sort(key=lambda s: g.index(s.activation))
    for i, s in enumerate(sites):
        s.id = f"site-{i}"
    ctx.state.sites = sites
    return g
