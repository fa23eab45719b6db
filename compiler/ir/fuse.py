"""A site as one `fused` node: the rewrite the gate replays and the rewrite pass applies.

A QLinearAdd bias folded into the accumulator (`ColumnGroup.acc_offset`) becomes part
of the fused node's int32 bias; a post-requantization add stage stays in its epilogue.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

from npu_backend.postprocess import ColumnPosts, Post, PostProcess, alike_but_scale
from prover.terms import Term, Var

from .column_group import epilogue_term
from .graph import Graph, Node
from .site import Site


def post_of(groups: Sequence[Any], n_cols: int) -> Post | tuple[PostProcess | None, ...]:
    """A single PostProcess when every column shares it, else one per column: a
    `ColumnPosts` where the columns are the first group's post but for their float32 scale."""
    if len(groups) == 1:
        return groups[0].post
    alike = _column_posts(groups, n_cols)
    if alike is not None:
        return alike
    per: list[PostProcess | None] = [None] * n_cols
    for grp in groups:
        for j in grp.columns:
            per[j] = grp.post
    return tuple(per)


def _column_posts(groups: Sequence[Any], n_cols: int) -> ColumnPosts | None:
    """`post_of`'s columns as a `ColumnPosts` where every group's post is the first one's but
    for its float32 scale, read without making the posts `build_columns` left unmade: a
    `FilledRun`'s groups, still as made, by the run's scales; any other group by
    `alike_but_scale`. None where a group is otherwise or a column has no group."""
    first = groups[0].post
    if first.requant.scheme != "float32":
        return None
    scales: list[float | None] = [None] * n_cols
    i = 0
    while i < len(groups):
        grp = groups[i]
        run = getattr(grp, "run", None)
        if run is not None and run.proto is first and run.stands_at(groups, i):
            for cols, s in zip(run.columns, run.after_scales, strict=True):
                for j in cols:
                    scales[j] = s
            i += len(run.groups)
            continue
        p = grp.post
        if p.requant.scale is None or not alike_but_scale((first, p)):
            return None
        for j in grp.columns:
            scales[j] = p.requant.scale
        i += 1
    if None in scales:
        return None
    return ColumnPosts(first, cast(list[float], scales))


class ColumnTerms(Sequence[tuple[tuple[int, ...], Term]]):
    """A fused node's `groups` attribute: per column group, (its columns, its epilogue over
    `Var('acc')`). Each term is built when the list is first read: only the IR's evaluator
    reads them, and a per-channel op has thousands of groups (efficientnet_b0: 28,536 terms,
    0.5 s, built for nothing in a check). The groups' posts are read with the terms."""

    __slots__ = ("_cols", "_groups", "_items")

    def __init__(self, groups: Sequence[Any]) -> None:
        self._cols = [tuple(grp.columns) for grp in groups]
        self._groups = list(groups)  # their posts read when the terms are (some made then)
        self._items: list[tuple[tuple[int, ...], Term]] | None = None

    def _all(self) -> list[tuple[tuple[int, ...], Term]]:
        if self._items is None:
            acc = Var("acc")
            self._items = [
                (c, epilogue_term(g.post, acc))
                for c, g in zip(self._cols, self._groups, strict=True)
            ]
        return self._items

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self) -> Iterator[tuple[tuple[int, ...], Term]]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._cols)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ColumnTerms | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all())


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
        groups=ColumnTerms(groups),
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
