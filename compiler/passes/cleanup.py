"""Cleanup: remove Identity, no-op Reshape/Transpose, and merge Reshape chains.

This is what makes a MatMul and its activation adjacent when an exporter left
redundant layout ops between them. Values are never changed, only element-
preserving ops removed.
"""

from __future__ import annotations

from compiler.ir.graph import Graph, Node
from compiler.ort.host import rename_host_value


def _is_noop(g: Graph, n: Node) -> bool:
    if n.op == "identity":
        return True
    if n.op == "reshape":
        return g.values[n.inputs[0]].shape == g.values[n.output].shape
    if n.op == "transpose":
        return tuple(n.attrs["perm"]) == tuple(range(len(n.attrs["perm"])))
    return False


def _bypass(g: Graph, n: Node) -> bool:
    """Remove `n` (a value-preserving op), keeping graph output names stable."""
    src, out = n.inputs[0], n.output
    if out in g.outputs:
        p = g.producer(src)
        if p is None or src in g.outputs or len(g.users(src)) != 1:
            return False
        p.outputs = [out if o == src else o for o in p.outputs]
        if p.op == "host_onnx":
            rename_host_value(p, src, out)
        g.remove([n])
        return True
    for u in g.users(out):
        if u.op == "host_onnx":
            rename_host_value(u, out, src)
    g.replace_uses(out, src)
    g.remove([n])
    return True


def _merge_reshapes(g: Graph) -> bool:
    for n in g.nodes:
        if n.op != "reshape":
            continue
        p = g.producer(n.inputs[0])
        if (
            p is not None
            and p.op == "reshape"
            and len(g.users(p.output)) == 1
            and p.output not in g.outputs
        ):
            n.inputs = [p.inputs[0]]
            n.origin = p.origin + n.origin
            g.remove([p])
            return True
    return False


def run(g: Graph, ctx=None) -> Graph:
    """Apply the cleanups until none applies."""
    changed = True
    while changed:
        changed = _merge_reshapes(g)
        for n in list(g.nodes):
            if _is_noop(g, n) and _bypass(g, n):
                changed = True
                break
    return g
