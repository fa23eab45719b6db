"""The two sides of a fusion's epilogue obligation, per output column group.

`before`: the original chain's meaning over the accumulator (the compute op's own
float requantization, then each op of the chain, with ONNX Runtime's tables).
`after`: the target's `PostProcess.epilogue_term` (the target's requantization
scheme, the table built by the target's LUT builder with clips and, when allowed,
an inner table composed into it: T'[x] = T[clip(x)]).

A QLinearAdd bias between the requantization and the table (`qlinear_binary` node) is
part of both sides: `before` applies ORT's QLinearAdd (a per-column function of the
8-bit value); `after` is either the target's post-requantization add stage (two
roundings, `bias` lists "requantized") or the bias folded into the int32 accumulator
with one requantization to the add's output scale (`acc_offset`, one rounding fewer: the
obligation decides whether that is still equal, or within bounded:N).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from npu_backend.postprocess import AddParams, LutParams, PostProcess, RequantParams
from npu_backend.target import requant_from_scale
from prover.inttypes import int_type
from prover.lut import build_lut, reorder_table
from prover.qlinear_binary import (
    BinaryOp,
    QLinearBinaryParams,
    SpanMode,
    qlinear_binary_table,
)
from prover.terms import Term, Var, op, term_hash

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
    acc_offset: int = 0  # a bias folded into the accumulator (added before `post`)

    def after(self, acc: Term) -> Term:
        """The fused form over the original accumulator `acc`."""
        if self.acc_offset:
            acc = op("add_const", acc, c=int(self.acc_offset))
        return self.post.epilogue_term(acc)


def bias_index(site: Site) -> int | None:
    """Index in `site.chain` of a QLinearAdd bias (`qlinear_binary` node), if any."""
    for i, n in enumerate(site.chain):
        if n.op == "qlinear_binary":
            return i
    return None


def binary_params(n: Node) -> QLinearBinaryParams:
    """The `QLinearBinaryParams` of a `qlinear_binary` node."""
    return QLinearBinaryParams(**n.attrs["params"])


def binary_const(n: Node, j: int) -> int:
    """The constant operand of a `qlinear_binary` node for output column `j`."""
    c = n.attrs["const"]
    return int(c[j] if len(c) > 1 else c[0])


def binary_table(n: Node, j: int) -> tuple[int, ...]:
    """ORT's QLinearAdd/QLinearMul as a function of the varying operand, column `j`."""
    a = n.attrs
    return qlinear_binary_table(
        BinaryOp(a["binary"]),
        binary_const(n, j),
        binary_params(n),
        x_is_a=bool(a["x_is_a"]),
        mode=SpanMode(a["mode"]),
        fma=bool(a.get("fma", True)),
    )


def column_node_term(n: Node, x: Term, j: int) -> Term:
    """`node_term`, with a `qlinear_binary` node's per-column constant for column `j`."""
    if n.op == "qlinear_binary":
        ty = binary_params(n).dtype
        return op("lut", x, table=binary_table(n, j), in_type=ty, index_order="offset")
    return node_term(n, x)


def add_stage(n: Node, j: int, fma: bool) -> AddParams:
    """The target's add stage computing node `n` (a QLinearAdd) for column `j`."""
    a, p = n.attrs, binary_params(n)
    x = (p.a_scale, p.a_zp) if a["x_is_a"] else (p.b_scale, p.b_zp)
    k = (p.b_scale, p.b_zp) if a["x_is_a"] else (p.a_scale, p.a_zp)
    mode = SpanMode(a["mode"])
    # which operand MLAS treats as the span `p` (prover.qlinear_binary.qlinear_binary_of)
    x_is_p = a["x_is_a"] != (mode is SpanMode.A_SCALAR)
    return AddParams(
        p.dtype, x[0], int(x[1]), binary_const(n, j), k[0], int(k[1]), p.c_scale, int(p.c_zp),
        x_is_p=x_is_p, q_scalar=mode is not SpanMode.GENERAL, fma=fma,
    )  # fmt: skip


def folded_bias(n: Node, requant_scale: float, j: int) -> tuple[int, float]:
    """(accumulator offset, requantization scale) folding QLinearAdd `n` into the accumulator.

    The accumulator's unit is `requant_scale * x_scale` (the producer requantizes with
    `requant_scale` to the add's x operand); the bias `(const - zp) * const_scale` in that
    unit is rounded half to even; the single requantization goes to the add's output scale.
    """
    a, p = n.attrs, binary_params(n)
    xs, (ks, kz) = (
        (p.a_scale, (p.b_scale, p.b_zp)) if a["x_is_a"] else (p.b_scale, (p.a_scale, p.a_zp))
    )
    unit = float(np.float32(requant_scale)) * float(np.float32(xs))
    offset = int(np.rint((binary_const(n, j) - kz) * float(np.float32(ks)) / unit))
    return offset, float(np.float32(unit / float(np.float32(p.c_scale))))


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
    bi = bias_index(site)
    after = site.chain[max(stage, -1 if bi is None else bi) + 1 :]
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
    bi = bias_index(site)
    two_rounding = bi is not None and "requantized" in caps.bias
    groups: dict[tuple[str, PostProcess, int], list[int]] = {}
    befores: dict[str, Term] = {}
    for j in range(n_cols):
        acc: Term = Var("acc")
        offset = 0
        if stage == -1:
            rq_ir = c.attrs["requant"]
            before = requant_term(acc, rq_ir, j)
            scale = rq_ir["scale"][j] if isinstance(rq_ir["scale"], tuple) else rq_ir["scale"]
            if bi is not None and not two_rounding:
                add = site.chain[bi]
                offset, scale = folded_bias(add, scale, j)
                rq = requant_from_scale(
                    scale, binary_params(add).c_zp, rq_ir["out"], caps.requant_scheme
                )
            else:
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
            before = column_node_term(n, before, j)
        add_p = add_stage(site.chain[bi], j, caps.add_fma) if two_rounding else None
        post = PostProcess(
            rq,
            None,
            act.attrs["function"],
            lut,
            act.attrs["out_type"],
            int(act.attrs["out_zp"]),
            add=add_p,
        )
        h = term_hash(before)
        befores[h] = before
        groups.setdefault((h, post, offset), []).append(j)
    return [
        ColumnGroup(tuple(cols), befores[h], post, offset)
        for (h, post, offset), cols in groups.items()
    ]


def _stage_out(site: Site, stage: int) -> str:
    if stage == -1:
        return site.compute.attrs["requant"]["out"]
    return site.chain[stage].attrs["out"]
