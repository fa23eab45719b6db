"""Values a node's subgraphs (If branches, Loop and Scan bodies) read from the outer scope.

ONNX lets a subgraph read any value visible where its node is; a host node that carries
such a node must take those values as inputs too, or ONNX Runtime cannot resolve them.
"""

from __future__ import annotations

import onnx


def _graphs(n: onnx.NodeProto) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _free(g: onnx.GraphProto) -> list[str]:
    """Names `g` (and its nested subgraphs) read but does not define, in first-use order."""
    defined = {v.name for v in g.input} | {t.name for t in g.initializer}
    defined |= {t.name for t in g.sparse_initializer}
    out: list[str] = []
    for n in g.node:
        for name in [*n.input, *(x for sub in _graphs(n) for x in _free(sub))]:
            if name and name not in defined and name not in out:
                out.append(name)
        defined.update(o for o in n.output if o)
    return out


def outer_scope_inputs(n: onnx.NodeProto) -> list[str]:
    """The outer-scope values `n`'s subgraphs read (empty for a node without subgraphs)."""
    out: list[str] = []
    for g in _graphs(n):
        for name in _free(g):
            if name not in out and name not in n.input:
                out.append(name)
    return out
