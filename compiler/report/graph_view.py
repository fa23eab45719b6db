"""The graph the HTML report draws: the whole ONNX graph when it is small, else a collapsed
view that stays readable at any model size.

Collapsing, in order, only as far as needed (each step keeps the graph's shape):
0. parameter nodes (computing from constants only: a `Constant`, a weight's
   `DequantizeLinear`) are left out: they are not the model's computation;
1. the nodes of one site become one box (the site's pattern);
2. a run of boxes in a line (each the only consumer of the one before) that look alike
   (same label, verdict and placement) and have no section of their own becomes one box
   "N x label";
3. what is still over `MAX_DRAWN` boxes is cut after the first `MAX_DRAWN` in graph order,
   and the page says so.
"""

from __future__ import annotations

from dataclasses import replace

from .views import GraphNode

FULL = 40  # up to this many ONNX nodes the graph is drawn node by node
MAX_DRAWN = 60  # boxes drawn at most after collapsing


def collapse(
    nodes: list[GraphNode],
    edges: list[tuple[str, str]],
    patterns: dict[str, str],
    sections: set[str],
) -> tuple[list[GraphNode], list[tuple[str, str]], str]:
    """(nodes, edges, note) to draw. `patterns`: site id -> pattern; `sections`: the sites
    with a section of their own on the page (never merged into a run). The note says what
    was collapsed or cut ("" when the graph is drawn whole)."""
    if len(nodes) <= FULL:
        return nodes, edges, ""
    n0 = len(nodes)
    consts = {n.name for n in nodes if (n.param or n.op_type == "Constant") and n.site is None}
    nodes = [n for n in nodes if n.name not in consts]
    edges = [(u, v) for u, v in edges if u not in consts and v not in consts]
    nodes, edges = _by_site(nodes, edges, patterns)
    nodes, edges = _runs(nodes, edges, sections)
    note = (
        f"{n0} ONNX nodes shown as {len(nodes)} boxes (a site's nodes in one box; alike runs "
        f"as N x{'; parameter nodes (Constant, weight Dequantize) left out' if consts else ''})"
    )
    if len(nodes) > MAX_DRAWN:
        kept = {n.name for n in nodes[:MAX_DRAWN]}
        note += (
            f"; the first {MAX_DRAWN} of {len(nodes)} boxes are drawn (every site is in the table)"
        )
        nodes = nodes[:MAX_DRAWN]
        edges = [(u, v) for u, v in edges if u in kept and v in kept]
    return nodes, edges, note


def _dedupe(edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for e in edges:
        if e[0] != e[1] and e not in seen:
            seen.add(e)
            out.append(e)
    return out


def _by_site(
    nodes: list[GraphNode], edges: list[tuple[str, str]], patterns: dict[str, str]
) -> tuple[list[GraphNode], list[tuple[str, str]]]:
    box: dict[str, str] = {}  # ONNX node -> box name
    out: list[GraphNode] = []
    seen: dict[str, GraphNode] = {}
    for n in nodes:
        if n.site is None:
            box[n.name] = n.name
            out.append(n)
            continue
        box[n.name] = n.site
        if n.site in seen:
            seen[n.site].host = seen[n.site].host or n.host
            continue
        g = GraphNode(n.site, patterns.get(n.site, n.op_type), [], [], n.site, n.verdict, n.host)
        seen[n.site] = g
        out.append(g)
    return out, _dedupe([(box[u], box[v]) for u, v in edges])


def _runs(
    nodes: list[GraphNode], edges: list[tuple[str, str]], sections: set[str]
) -> tuple[list[GraphNode], list[tuple[str, str]]]:
    succ: dict[str, list[str]] = {n.name: [] for n in nodes}
    pred: dict[str, list[str]] = {n.name: [] for n in nodes}
    for u, v in edges:
        succ[u].append(v)
        pred[v].append(u)
    by_name = {n.name: n for n in nodes}

    def key(n: GraphNode) -> tuple:
        return (n.op_type, n.verdict, n.host)

    def mergeable(n: GraphNode) -> bool:
        return n.site not in sections if n.site else True

    head: dict[str, str] = {}  # node -> the first node of its run
    for n in nodes:
        p = pred[n.name]
        if len(p) == 1 and len(succ[p[0]]) == 1 and mergeable(n):
            prev = by_name[p[0]]
            if mergeable(prev) and key(prev) == key(n):
                head[n.name] = head.get(prev.name, prev.name)
                continue
        head[n.name] = n.name
    members: dict[str, list[GraphNode]] = {}
    for n in nodes:
        members.setdefault(head[n.name], []).append(n)
    out = []
    box: dict[str, str] = {}  # run head -> the name of its box
    for name, run in members.items():
        first = run[0]
        if len(run) == 1:
            out.append(first)
            box[name] = first.name
            continue
        span = f"{first.name} .. {run[-1].name}"
        out.append(
            replace(first, name=span, op_type=f"{len(run)} x {first.op_type}", count=len(run))
        )
        box[name] = span
    return out, _dedupe([(box[head[u]], box[head[v]]) for u, v in edges])
