"""Ops' columns as column families (`prover.family`), built from the IR (per channel, or
per tensor: every column of one scale).

- `lowering_family`: the lowering obligation of column j is `requant_term(acc, rq, j)`
  (the model's float requantization) against `posts[j].epilogue_term(acc)` (the target's),
  over the column's accumulator range. The columns differ only in their scale, so the
  family holds the two sides once; where the target requantizes as the model does (a
  float32 requantizer and a float32 scale), a column is an identity and is proven with the
  rest in one step, without building its obligation.
- `site_family`: a fused site's epilogue groups (`ColumnGroup`: `before` against
  `after(acc)`), one template per side; where the NPU's table and requantization are the
  reference's own (the table comes from ONNX Runtime), a group is an identity.

The families are proven by `prove.identities`; members that are not identities are decided
one by one, as before. Used by the lowering pass and `prove.site_obligations`; it imports
no pass and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.errors import InternalError
from compiler.ir.column_group import ColumnGroup, FilledGroup, FilledRun
from compiler.ir.graph import Node
from compiler.ir.semantics import requant_term
from compiler.ir.site import Site
from npu_backend.postprocess import ColumnPosts, PostProcess, post_rest
from prover.family import Family, family, fill, hole_path, matches, scale_in, with_hole
from prover.matmul import AccRange
from prover.policy import Policy
from prover.terms import Var


def lowering_family(
    n: Node,
    rq: dict[str, Any],
    posts: Sequence[PostProcess | None] | ColumnPosts,
    r: AccRange,
    policy: Policy,
) -> Family | None:
    """The family of `n`'s per-column requantization lowerings, or None where the sides are
    not one template with a float scale (a fixed-point requantizer)."""
    acc = Var("acc")
    at: Callable[[int], PostProcess]
    if isinstance(posts, ColumnPosts):  # its columns' scales, no column's post made
        scales: list[float | None] = list(posts.scales)
        at = posts.post
    else:
        if any(p is None for p in posts):
            return None
        ps = [p for p in posts if p is not None]
        scales = [p.requant.scale for p in ps]
        at = ps.__getitem__
    first, last = 0, len(scales) - 1
    before = with_hole(requant_term(acc, rq, first))
    after = with_hole(at(first).epilogue_term(acc))
    if before is None or after is None:
        return None
    if any(s is None for s in scales):  # a fixed-point requantizer: no float scale
        return None
    fam = family(
        "lowering",
        "acc",
        before[0],
        after[0],
        np.broadcast_to(np.asarray(rq["scale"], dtype=np.float64), (len(scales),)),
        np.asarray(scales, dtype=np.float64),
        r.lo,
        r.hi,
        np.arange(len(scales)),
        policy,
        note=f"lower {n.name}",
    )
    # Every column is built alike (only the scale differs): the first and the last say so.
    for j in (first, last):
        if not matches(fam, j, requant_term(acc, rq, j), at(j).epilogue_term(acc)):
            raise InternalError(f"{n.name}: column {j}'s lowering is not its family's member")
    return fam


def _alike_to(first: ColumnGroup) -> Callable[[ColumnGroup], bool]:
    """Whether a group's postprocessing is `first`'s but for its requantization scale (then
    its `after(acc)` is `first`'s with that scale: `PostProcess.epilogue_term`). `first`'s
    fields are read once: a per-channel site has thousands of groups."""
    rest, offset = post_rest(first.post), first.acc_offset

    def alike(grp: ColumnGroup) -> bool:
        p = grp.post
        rq = p.requant
        if grp.acc_offset != offset or rq.scale is None:
            return False
        # the fields' tuples (a copy with the first one's scale, compared whole, cost most of
        # the family's building)
        return post_rest(p) == rest

    return alike


def _whole_run(run: FilledRun, groups: Sequence[ColumnGroup], at: int, first: ColumnGroup) -> bool:
    """Whether `groups[at:]` starts with `run`'s groups (`FilledRun.stands_at`) and each
    one's after term is `first`'s with its own requantization scale (`_alike_to`: the run's
    posts are `first`'s but for that scale, and its offsets, 0, are `first`'s)."""
    return (
        run.proto is first.post
        and first.acc_offset == 0
        and run.proto.requant.scale is not None
        and run.stands_at(groups, at)
    )


def _add_run(
    run: FilledRun, at: int, sb: list[float], sa: list[float], cols: list[int], member_of: list[int]
) -> int:
    """Append `run`'s members (its groups at `at`..) to the family's lists; the index after."""
    n = len(run.groups)
    if all(len(c) == 1 for c in run.columns):
        sb += run.fill_scales
        sa += run.after_scales
        cols += [c[0] for c in run.columns]
        member_of += range(at, at + n)
    else:
        for k, c in enumerate(run.columns):
            m = len(c)
            sb += [run.fill_scales[k]] * m
            sa += [run.after_scales[k]] * m
            cols += c
            member_of += [at + k] * m
    return at + n


def site_family(site: Site, r: AccRange, policy: Policy) -> tuple[Family, set[int]] | None:
    """(the family of `site`'s epilogue groups that are identities, the indices of those
    groups in `site.post`), or None when no group is one."""
    acc = Var("acc")
    groups = site.post
    tb = with_hole(groups[0].before)
    ta = with_hole(groups[0].after(acc))
    if tb is None or ta is None:
        return None
    pb, pa = hole_path(tb[0]), hole_path(ta[0])
    assert pb is not None and pa is not None
    sb: list[float] = []
    sa: list[float] = []
    cols: list[int] = []
    member_of: list[int] = []
    first = groups[0]
    is_tb: dict[int, bool] = {}  # a FilledGroup's template (by id, kept by its groups): tb's?

    def filled_from_tb(grp: ColumnGroup) -> bool:
        t = grp.template if isinstance(grp, FilledGroup) else None
        if t is None:
            return False
        if id(t) not in is_tb:
            is_tb[id(t)] = t == tb[0]
        return is_tb[id(t)]

    alike = _alike_to(first)
    gi = 0
    while gi < len(groups):
        grp = groups[gi]
        run = getattr(grp, "run", None)  # a FilledGroup's
        if run is not None and _whole_run(run, groups, gi, first) and filled_from_tb(grp):
            # the run's groups, still as made: members by their scales, read at once
            gi = _add_run(run, gi, sb, sa, cols, member_of)
            continue
        gi += 1
        # a group filled from tb's template is its member by its scale, its term unbuilt
        hb = float(grp.scale) if filled_from_tb(grp) else scale_in(grp.before, tb[0], pb)
        if hb is None:
            continue  # another shape: decided alone
        if alike(grp):  # its after term is the first one's with its own scale
            ha = grp.post.requant.scale
        else:
            ha = scale_in(grp.after(acc), ta[0], pa)
        if ha is None:
            continue
        n = len(grp.columns)
        sb += [hb] * n
        sa += [ha] * n
        cols += grp.columns
        member_of += [gi - 1] * n
    if not cols:
        return None
    for gi in {member_of[0], member_of[-1]}:  # built alike: the first and the last say so
        grp = groups[gi]
        i = member_of.index(gi)
        if fill(ta[0], sa[i]) != grp.after(acc) or fill(tb[0], sb[i]) != grp.before:
            raise InternalError(f"{site.id}: group {gi}'s epilogue is not its family's member")
    c = np.asarray(cols, dtype=np.int64)
    lo, hi = np.asarray(r.lo, dtype=np.int64)[c], np.asarray(r.hi, dtype=np.int64)[c]
    fam = family("epilogue", "acc", tb[0], ta[0], sb, sa, lo, hi, c, policy, note=site.id)
    same = fam.identities()
    owner = np.asarray(member_of)
    covered = set(owner[same].tolist()) - set(owner[~same].tolist())  # whole groups only
    if not covered:
        return None
    return fam.subset(np.isin(owner, sorted(covered))), covered
