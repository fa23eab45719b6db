"""A per-channel op's requantization lowering as one column family (`prover.family`).

The lowering obligation of column j is `requant_term(acc, rq, j)` (the model's float
requantization) against `posts[j].epilogue_term(acc)` (the target's), over the column's
accumulator range. The columns differ only in their scale, so the family holds the two
sides once; where the target requantizes as the model does (a float32 requantizer and a
float32 scale), a column is an identity and is proven with the rest in one step, without
building its obligation. Used by the lowering pass; it imports no pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.errors import InternalError
from compiler.ir.context import Context
from compiler.ir.graph import Node
from compiler.ir.semantics import requant_term
from compiler.proving import prove
from npu_backend.postprocess import PostProcess
from prover.family import family, matches, with_hole
from prover.matmul import AccRange
from prover.policy import Policy
from prover.terms import Var


def requant_identities(
    n: Node,
    rq: dict[str, Any],
    posts: Sequence[PostProcess | None],
    r: AccRange,
    policy: Policy,
    ctx: Context,
) -> np.ndarray:
    """Per column of `n`: whether its requantization lowering is proven as an identity (a
    boolean array; all false where the sides are not one template with a float scale)."""
    acc = Var("acc")
    none = np.zeros(len(posts), dtype=bool)
    if any(p is None for p in posts):
        return none
    ps = [p for p in posts if p is not None]
    first, last = 0, len(ps) - 1
    before = with_hole(requant_term(acc, rq, first))
    after = with_hole(ps[first].epilogue_term(acc))
    if before is None or after is None:
        return none
    scales = [p.requant.scale for p in ps]
    if any(s is None for s in scales):  # a fixed-point requantizer: no float scale
        return none
    fam = family(
        "lowering",
        "acc",
        before[0],
        after[0],
        np.broadcast_to(np.asarray(rq["scale"], dtype=np.float64), (len(ps),)),
        np.asarray(scales, dtype=np.float64),
        r.lo,
        r.hi,
        np.arange(len(ps)),
        policy,
        note=f"lower {n.name}",
    )
    # Every column is built alike (only the scale differs): the first and the last say so.
    for j in (first, last):
        if not matches(fam, j, requant_term(acc, rq, j), ps[j].epilogue_term(acc)):
            raise InternalError(f"{n.name}: column {j}'s lowering is not its family's member")
    return prove.identities(fam, ctx)
