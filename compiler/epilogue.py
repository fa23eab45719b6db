"""The two sides of a fusion's epilogue obligation, per output column group.

`before`: the original chain's meaning over the accumulator (the compute op's own
float requantization, then each op of the chain, with ONNX Runtime's tables).
`after`: the target's `PostProcess.epilogue_term` (the target's requantization
scheme, the table built by the target's LUT builder with clips and, when allowed,
an inner table composed into it: T'[x] = T[clip(x)]).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from npu_backend.postprocess import LutParams, PostProcess, RequantParams
from npu_backend.target import requant_from_scale
from prover.inttypes import int_type
from prover.lut import build_lut, reorder_table
from prover.terms import Term, Var, term_hash

from .ir import Node
from .semantics import node_term, requant_term
from .site import Site

SCHEME_OF = {"double": "fixed_double", "single": "fixed_single", "float": "float32"}


@dataclass
class ColumnGroup:
    """Output columns sharing one epilogue: `before`/`post` over `Var('acc')`."""

    columns: tuple[int, ...]
    before: Term
    post: PostProcess


def requant_stage(site: Site) -> int:
    """Index in `site.chain` of the requantization stage; -1 = the compute op's own."""
    if site.compute.attrs.get("requant") is not None:
        return -1
    for i, n in enumerate(site.chain):
        if n.op == "requantize":
            return i
    raise ValueError(f"site {site.id}: no requantization between the accumulator and the table")


def npu_logical_table(lut: Node, target) -> tuple[np.ndarray, object]:
    """The target toolchain's table for an activation node, in offset (logical) order."""
    a = lut.attrs
    spec = target.lut_spec(
        a["function"],
        a["in_scale"],
        a["in_zp"],
        a["in_type"],
        a["out_scale"],
        a["out_zp"],
        a["out_type"],
    )
    logical = build_lut(dataclasses.replace(spec, index_order="offset"))
    return logical, spec


def composed_table(site: Site, target, stage: int) -> tuple[np.ndarray, object]:
    """The table the NPU applies after requantization: the chain after the stage, composed."""
    after = site.chain[stage + 1 :]
    in_t = int_type(_stage_out(site, stage))
    xs = np.arange(in_t.min, in_t.max + 1, dtype=np.int64)
    v = xs.copy()
    spec = None
    for n in after:
        if n.op == "clip":
            v = np.clip(v, n.attrs["lo"], n.attrs["hi"])
        elif n.op == "lut":
            t, spec = npu_logical_table(n, target)
            v = t[v - int_type(n.attrs["in_type"]).min]
    return v, spec


def build_columns(site: Site, target, kind: str = "MatMul") -> list[ColumnGroup]:
    """Column groups with identical (before, after) epilogues."""
    c = site.compute
    n_cols = c.attrs["w"].shape[1]
    stage = requant_stage(site)
    caps = target.compute(kind)
    logical, spec = composed_table(site, target, stage)
    act = site.activation
    in_type = _stage_out(site, stage)
    order = target.lut_builder.index_order
    table = tuple(int(v) for v in reorder_table(logical, int_type(in_type), "offset", order))
    lut = LutParams(table, in_type, act.attrs["out_type"], order, spec)
    groups: dict[tuple[str, PostProcess], list[int]] = {}
    for j in range(n_cols):
        acc: Term = Var("acc")
        if stage == -1:
            rq_ir = c.attrs["requant"]
            before = requant_term(acc, rq_ir, j)
            scale = rq_ir["scale"][j] if isinstance(rq_ir["scale"], tuple) else rq_ir["scale"]
            rq = requant_from_scale(scale, rq_ir["zp"], rq_ir["out"], caps.requant_scheme)
        else:
            before = acc
            a = site.chain[stage].attrs
            rq = RequantParams(
                SCHEME_OF[a["scheme"]],
                int(a["zp"]),
                a["out"],
                scale=a.get("scale"),
                multiplier=a.get("multiplier"),
                shift=a.get("shift"),
            )
        for n in site.chain:
            before = node_term(n, before)
        post = PostProcess(
            rq, None, act.attrs["function"], lut, act.attrs["out_type"], int(act.attrs["out_zp"])
        )
        groups.setdefault((term_hash(before), post), []).append(j)
    out = []
    for (_, post), cols in groups.items():
        j = cols[0]
        before = Var("acc")
        if stage == -1:
            before = requant_term(before, c.attrs["requant"], j)
        for n in site.chain:
            before = node_term(n, before)
        out.append(ColumnGroup(tuple(cols), before, post))
    return out


def _stage_out(site: Site, stage: int) -> str:
    if stage == -1:
        return site.compute.attrs["requant"]["out"]
    return site.chain[stage].attrs["out"]
