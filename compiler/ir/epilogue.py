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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from compiler.errors import InternalError
from npu_backend.postprocess import AddParams, ColumnPosts, LutParams, PostProcess, RequantParams
from npu_backend.target import Target, float32_scales, requant_from_scale, requant_from_scales
from prover.domain import NUMPY
from prover.family import with_hole
from prover.inttypes import int_type
from prover.lut import LOADED_TABLE, LutSpec, build_lut, reorder_table
from prover.qlinear_binary import SpanMode
from prover.terms import Term, Var, evaluate, op

from .column_group import ColumnGroup, FilledGroup, FilledRun
from .graph import Node
from .semantics import (
    node_term,
    qlinear_binary_column_table,
    qlinear_binary_params,
    requant_scale,
    requant_term,
)
from .site import Site

SCHEME_OF = {"double": "fixed_double", "single": "fixed_single", "float": "float32"}


def requant_params(n: Node) -> RequantParams:
    """The NPU requantizer computing `requantize` node `n` as it is (its own scheme and
    parameters), for a fused epilogue stage or the standalone unit."""
    a = n.attrs
    return RequantParams(
        SCHEME_OF[a["scheme"]],
        int(a["zp"]),
        a["out"],
        scale=a.get("scale"),
        multiplier=a.get("multiplier"),
        shift=a.get("shift"),
    )


@dataclass(frozen=True, kw_only=True)
class BiasView:
    """A bias between the requantization and the table, whatever op carries it: a
    QLinearAdd (`qlinear_binary` node) or ORT's float DQ -> Add -> Q group."""

    start: int  # first chain index it covers
    end: int  # last chain index it covers
    type: str  # the 8-bit value it adds to (and its result)
    x_scale: float
    x_zp: int
    const: tuple[int, ...]  # per output column
    const_type: str
    const_scale: float
    const_zp: int
    c_scale: float
    c_zp: int
    x_is_p: bool  # the varying value is MLAS's span operand
    q_scalar: bool
    tables: tuple[tuple[int, ...], ...] | None = None  # the reference's, when not derived
    node: Node | None = None

    def const_of(self, j: int) -> int:
        return int(self.const[j] if len(self.const) > 1 else self.const[0])

    def table(self, j: int) -> tuple[int, ...]:
        """The reference's value for every x (offset order), column `j`."""
        if self.tables is not None:
            return self.tables[j if len(self.tables) > 1 else 0]
        if self.node is None:
            raise InternalError("a bias view holds neither its tables nor its node")
        return qlinear_binary_column_table(self.node, j)


def bias_view(site: Site) -> BiasView | None:
    """The site's bias, if any (a `qlinear_binary` node, or `site.float_bias`)."""
    fb = site.float_bias
    if fb is not None:
        return BiasView(
            start=fb.start,
            end=fb.end,
            type=fb.x_type,
            x_scale=fb.x_scale,
            x_zp=fb.x_zp,
            const=fb.const,
            const_type=fb.const_type,
            const_scale=fb.const_scale,
            const_zp=fb.const_zp,
            c_scale=fb.y_scale,
            c_zp=fb.y_zp,
            x_is_p=True,
            q_scalar=False,
            tables=fb.tables,
        )
    for i, n in enumerate(site.chain):
        if n.op == "qlinear_binary":
            a, p = n.attrs, qlinear_binary_params(n)
            x = (p.a_scale, p.a_zp) if a["x_is_a"] else (p.b_scale, p.b_zp)
            k = (p.b_scale, p.b_zp) if a["x_is_a"] else (p.a_scale, p.a_zp)
            mode = SpanMode(a["mode"])
            return BiasView(
                start=i,
                end=i,
                type=p.dtype,
                x_scale=x[0],
                x_zp=int(x[1]),
                const=tuple(int(v) for v in a["const"]),
                const_type=p.dtype,
                const_scale=k[0],
                const_zp=int(k[1]),
                c_scale=p.c_scale,
                c_zp=int(p.c_zp),
                # which operand MLAS treats as the span (prover.qlinear_binary_of)
                x_is_p=a["x_is_a"] != (mode is SpanMode.A_SCALAR),
                q_scalar=mode is not SpanMode.GENERAL,
                node=n,
            )
    return None


def bias_index(site: Site) -> int | None:
    """Last index in `site.chain` covered by the site's bias, if any."""
    b = bias_view(site)
    return None if b is None else b.end


def before_term(site: Site, x: Term, j: int, start: int = 0) -> Term:
    """The chain from index `start` on, for column `j` (the bias as its reference table)."""
    return chain_term(site, x, j, bias_view(site), start)


def chain_term(site: Site, x: Term, j: int, b: BiasView | None, start: int = 0) -> Term:
    """`before_term` with the site's bias view `b` given (built once for all columns)."""
    for i, n in enumerate(site.chain):
        if i < start:
            continue
        if b is not None and b.start <= i <= b.end:
            if i == b.start:
                x = op("lut", x, table=b.table(j), in_type=b.type, index_order="offset")
            continue
        x = node_term(n, x)
    return x


def add_stage(b: BiasView, j: int, fma: bool) -> AddParams:
    """The target's add stage computing bias `b` for column `j`."""
    return AddParams(
        type=b.type,
        x_scale=b.x_scale,
        x_zp=b.x_zp,
        const=b.const_of(j),
        const_scale=b.const_scale,
        const_zp=b.const_zp,
        c_scale=b.c_scale,
        c_zp=b.c_zp,
        x_is_p=b.x_is_p,
        q_scalar=b.q_scalar,
        fma=fma,
        const_type=None if b.const_type == b.type else b.const_type,
    )


def folded_bias(b: BiasView, requant_scale: float, j: int) -> tuple[int, float]:
    """(accumulator offset, requantization scale) folding bias `b` into the accumulator.

    The accumulator's unit is `requant_scale * x_scale` (the producer requantizes with
    `requant_scale` to the bias's x operand); the bias `(const - zp) * const_scale` in that
    unit is rounded half to even; the single requantization goes to the output scale.
    """
    unit = float(np.float32(requant_scale)) * float(np.float32(b.x_scale))
    offset = int(np.rint((b.const_of(j) - b.const_zp) * float(np.float32(b.const_scale)) / unit))
    return offset, float(np.float32(unit / float(np.float32(b.c_scale))))


def requant_stage(site: Site) -> int:
    """Index in `site.chain` of the requantization stage; -1 = the compute op's own."""
    if site.compute.attrs.get("requant") is not None:
        return -1
    for i, n in enumerate(site.chain):
        if n.op == "requantize":
            return i
    raise ValueError(f"site {site.id}: no requantization between the accumulator and the table")


def lut_spec_of(lut: Node, target: Target) -> LutSpec:
    """The target toolchain's table description (`LutSpec`) for an activation node."""
    a = lut.attrs
    return target.lut_spec(
        a["function"],
        a["in_scale"],
        a["in_zp"],
        a["in_type"],
        a["out_scale"],
        a["out_zp"],
        a["out_type"],
    )


def absorbed_requantizes(site: Site, target: Target) -> list[Node]:
    """The requantizes of `site.chain` after its requantization stage (and after any bias)
    that the table absorbs: each maps one 8-bit code to one 8-bit code, so the table the
    postprocessor applies is the activation's table composed with it, T'[x] = T[rq(x)] (an
    exact function of the stage's code, decided with the rest of the obligation). Only where
    the compute path loads a table as given (`LOADED_TABLE` in its functions) of the code's
    size (`lut_sizes`): a table the toolchain builds from a named function is that function
    alone. Empty when there is no stage or nothing to absorb."""
    caps = target.compute(_compute_kind(site))
    if caps is None or LOADED_TABLE not in caps.functions:
        return []
    try:
        stage = requant_stage(site)
    except ValueError:
        return []
    bi = bias_index(site)
    start = max(stage, -1 if bi is None else bi) + 1
    if any(n.op == "requantize" for n in site.chain[stage + 1 : start]):
        return []  # a requantize before the bias: the add stage would read its output
    out = []
    for n in site.chain[start:]:
        if n.op != "requantize":
            continue
        src = n.attrs.get("in") or _value_type(site, n)
        if src not in ("int8", "uint8") or n.attrs["out"] not in ("int8", "uint8"):
            return []
        if int_type(src).size not in caps.lut_sizes:
            return []
        out.append(n)
    return out


def _value_type(site: Site, n: Node) -> str | None:
    """The element type of `n`'s input within the site (the node before it, or the
    stage's output)."""
    i = site.chain.index(n)
    if i == 0:
        rq = site.compute.attrs.get("requant")
        return None if rq is None else str(rq["out"])
    prev = site.chain[i - 1]
    if prev.op == "requantize":
        return str(prev.attrs["out"])
    if prev.op == "lut":
        return str(prev.attrs["out_type"])
    if prev.op == "clip":
        return _value_type(site, prev)
    return None


def _compute_kind(site: Site) -> str:
    from .npu_step import compute_kind

    return compute_kind(site.compute)


def npu_function(lut: Node, functions: Iterable[str]) -> str:
    """The function a compute path (or the standalone unit) with `functions` applies for an
    activation node: its own, or, where the path lacks it but loads any table
    (`prover.lut.LOADED_TABLE`), the loaded table."""
    f = str(lut.attrs["function"])
    fs = frozenset(functions)
    return LOADED_TABLE if f not in fs and LOADED_TABLE in fs else f


def npu_logical_table(
    lut: Node, target: Target, function: str | None = None
) -> tuple[np.ndarray, LutSpec | None]:
    """The target toolchain's table for an activation node, in offset (logical) order; a
    loaded table (`function` or the node's function `LOADED_TABLE`) is the node's own."""
    if (function or lut.attrs["function"]) == LOADED_TABLE:
        return np.asarray(lut.attrs["table"], dtype=np.int64), None
    spec = lut_spec_of(lut, target)
    logical = build_lut(dataclasses.replace(spec, index_order="offset"))
    return logical, spec


def composed_table(
    site: Site, target: Target, stage: int, functions: Iterable[str] = ()
) -> tuple[np.ndarray, LutSpec | None]:
    """The table the NPU applies after requantization: the chain after the stage, composed."""
    bi = bias_index(site)
    after = site.chain[max(stage, -1 if bi is None else bi) + 1 :]
    in_t = int_type(_stage_out(site, stage))
    xs = np.arange(in_t.min, in_t.max + 1, dtype=np.int64)
    v = xs.copy()
    spec: LutSpec | None = None
    absorbed = False
    for n in after:
        if n.op == "clip":
            v = np.clip(v, n.attrs["lo"], n.attrs["hi"])
        elif n.op == "lut":
            t, spec = npu_logical_table(n, target, npu_function(n, functions))
            v = t[v - int_type(n.attrs["in_type"]).min]
        elif n.op == "requantize":  # absorbed (`absorbed_requantizes`): T'[x] = T[rq(x)]
            v = np.asarray(evaluate(node_term(n, Var("x")), NUMPY, {"x": v}), dtype=np.int64)
            absorbed = True
    return v, None if absorbed else spec


def build_columns(site: Site, target: Target, kind: str = "MatMul") -> list[ColumnGroup]:
    """Column groups with identical (before, after) epilogues."""
    c = site.compute
    n_cols = c.attrs["w"].shape[1]
    stage = requant_stage(site)
    caps = target.compute(kind)
    if caps is None:
        raise ValueError(f"target {target.name} has no {kind} unit")
    logical, spec = composed_table(site, target, stage, caps.functions)
    act = site.activation
    function = npu_function(act, caps.functions)
    if absorbed_requantizes(site, target):
        function = LOADED_TABLE  # no named function is the table composed with a requantize
    in_type = _stage_out(site, stage)
    order = target.lut_builder.index_order
    table = tuple(int(v) for v in reorder_table(logical, int_type(in_type), "offset", order))
    lut = LutParams(table, in_type, act.attrs["out_type"], order, spec)
    bias = bias_view(site)
    two_rounding = bias is not None and "requantized" in caps.bias
    groups: dict[tuple[Term, PostProcess, int], list[int]] = {}
    # A column's epilogue depends on j only through its requantization scale and its bias
    # (constant, reference table): columns sharing those are built once, not once each.
    built: dict[tuple, list[int]] = {}
    per_col_table = bias is not None and bias.tables is not None and len(bias.tables) > 1
    # Without a bias only the float scale varies: after the first column, a column's `before`
    # is the first one's with its own scale (`prover.family.fill`), and distinct scales are
    # distinct epilogues, so they are grouped without hashing the terms (per channel: tens
    # of thousands of columns). Checked against the column's own build at the last one.
    template: Term | None = None
    filled: list[tuple[Term, float, PostProcess, list[int], int]] = []
    rq_ir: dict[str, Any] = c.attrs.get("requant") or {}
    scales = _column_scales(rq_ir, n_cols) if stage == -1 else [0.0] * n_cols
    # per channel without a folded bias: each column's requantizer, converted at once (a
    # float32 one's scale only: the bias-free columns after the first make no requantizer)
    per_col = stage == -1 and (bias is None or two_rounding) and _per_column(rq_ir)
    f32 = float32_scales(scales) if per_col and caps.requant_scheme == "float32" else None
    rqs = (
        requant_from_scales(scales, rq_ir["zp"], rq_ir["out"], caps.requant_scheme)
        if per_col and f32 is None
        else None
    )
    out_type, out_zp = act.attrs["out_type"], int(act.attrs["out_zp"])
    bulk = False
    lazy: _Lazy | None = None
    for j in range(n_cols):
        if template is not None and bias is None:
            if f32 is not None:
                lazy = _lazy_rest(scales, f32, built, j)
                bulk = True
                break
            if rqs is not None:
                filled += _filled_rest(template, scales, rqs, built, j, groups)
                bulk = True
                break
        key = (
            scales[j] if stage == -1 else None,
            None if bias is None else bias.const_of(j),
            j if per_col_table else None,
        )
        cols = built.get(key)
        if cols is not None:
            cols.append(j)
            continue
        acc: Term = Var("acc")
        offset = 0
        scale = scales[j]
        if rqs is not None:
            rq = rqs[j]
        elif f32 is not None:  # `requant_from_scale`'s float32 requantizer
            rq = RequantParams("float32", int(rq_ir["zp"]), rq_ir["out"], scale=f32[j])
        elif stage == -1:
            if bias is not None and not two_rounding:
                offset, rq_scale = folded_bias(bias, scale, j)
                rq = requant_from_scale(rq_scale, bias.c_zp, rq_ir["out"], caps.requant_scheme)
            else:
                rq = requant_from_scale(scale, rq_ir["zp"], rq_ir["out"], caps.requant_scheme)
        else:
            rq = requant_params(site.chain[stage])
        add_p = add_stage(bias, j, caps.add_fma) if two_rounding and bias is not None else None
        post = PostProcess(rq, None, function, lut, out_type, out_zp, add=add_p)
        if template is not None:
            cols = [j]
            filled.append((template, scale, post, cols, j))
        else:
            first = requant_term(acc, c.attrs["requant"], j) if stage == -1 else acc
            before = chain_term(site, first, j, bias)
            # grouped by the term itself (its structural hash is kept on it): a per-channel
            # op's groups are mostly proven as one family (`prover.family`), so no per-group
            # canonical text is built here for obligations that are never made
            cols = groups.setdefault((before, post, offset), [])
            cols.append(j)
            if stage == -1 and bias is None:
                holed = with_hole(before)
                if holed is not None and holed[1] == scale:
                    template = holed[0]
        built[key] = cols
    out = [
        ColumnGroup(tuple(cols), before, post, offset)
        for (before, post, offset), cols in groups.items()
    ]
    if lazy is not None:
        assert template is not None
        out += _lazy_run(site, template, next(iter(groups))[1], lazy)
    elif filled:
        run = None
        cols_of = [tuple(cs) for _, _, _, cs, _ in filled]
        if bulk and template is not None and caps.requant_scheme == "float32":
            # float32 requantizers (`requant_from_scales`): only their scales differ, all set
            after = cast(list[float], [p.requant.scale for _, _, p, _, _ in filled])
            proto = next(iter(groups))[1]
            run = FilledRun(template, proto, [sc for _, sc, _, _, _ in filled], after, cols_of)
        t, sc, p, _, last_j = filled[-1]
        last = FilledGroup(cols_of[-1], post=p, template=t, scale=sc, run=run)
        own = chain_term(site, requant_term(Var("acc"), c.attrs["requant"], last_j), last_j, None)
        if own != last.before:
            raise InternalError(f"{site.id}: column {last_j}'s epilogue is not its scale's fill")
        made = [
            FilledGroup(cols, post=p, template=t, scale=sc, run=run)
            for (t, sc, p, _, _), cols in zip(filled[:-1], cols_of, strict=False)
        ]
        made.append(last)
        if run is not None:
            run.groups = made
        out += made
    return out


def _lazy_run(site: Site, template: Term, proto: PostProcess, lazy: _Lazy) -> list[FilledGroup]:
    """The groups of `_lazy_rest`'s columns: one `FilledRun` over `proto` (the first
    group's post), each group's post made only when read (`FilledGroup`)."""
    fills, afters, cols, last_j = lazy
    run = FilledRun(template, proto, fills, afters, [tuple(c) for c in cols])
    made = run.groups = FilledGroup.of_run(run)
    acc = requant_term(Var("acc"), site.compute.attrs["requant"], last_j)
    own = chain_term(site, acc, last_j, None)
    if own != made[-1].before:
        raise InternalError(f"{site.id}: column {last_j}'s epilogue is not its scale's fill")
    return made


def _by_scale(
    scales: list[float], built: dict[tuple, list[int]], start: int
) -> tuple[list[int], dict[float, list[int]]]:
    """Columns `start`.. by their scale: each joins the columns of its scale (`built`'s,
    keyed by it, appended to in place) or starts its own; (the columns that started one,
    in order; the columns of every scale)."""
    by_scale = {k[0]: cols for k, cols in built.items()}
    firsts: list[int] = []
    for j in range(start, len(scales)):
        cols = by_scale.get(scales[j])
        if cols is None:
            by_scale[scales[j]] = [j]
            firsts.append(j)
        else:
            cols.append(j)
    return firsts, by_scale


# `_lazy_rest`'s answer: per scale first met, in order, the scale, its float32 value and
# its columns; and the last one's first column
_Lazy = tuple[list[float], list[float], list[list[int]], int]


def _lazy_rest(
    scales: list[float], f32: list[float], built: dict[tuple, list[int]], start: int
) -> _Lazy | None:
    """`_filled_rest` for float32 requantizers, making no post (`_Lazy`); None where no
    scale is first met at or after `start`."""
    firsts, by_scale = _by_scale(scales, built, start)
    if not firsts:
        return None
    fills = [scales[j] for j in firsts]
    return fills, [f32[j] for j in firsts], [by_scale[s] for s in fills], firsts[-1]


def _filled_rest(
    template: Term,
    scales: list[float],
    rqs: list[RequantParams],
    built: dict[tuple, list[int]],
    start: int,
    groups: dict[tuple[Term, PostProcess, int], list[int]],
) -> list[tuple[Term, float, PostProcess, list[int], int]]:
    """`build_columns`' filled entries for columns `start`.. of a bias-free per-channel op
    once the first column gave `template`: only the scale varies, so a column joins the
    columns of its scale (`built`, keyed by it) or is filled from the template, its post the
    first group's with its own requantizer (made at once, not per column)."""
    firsts, by_scale = _by_scale(scales, built, start)
    proto = next(iter(groups))[1]
    posts = proto.with_requants([rqs[j] for j in firsts])
    return [
        (template, scales[j], p, by_scale[scales[j]], j) for j, p in zip(firsts, posts, strict=True)
    ]


def _per_column(rq: dict[str, Any]) -> bool:
    scale = rq["scale"]
    return isinstance(scale, tuple | list) or getattr(scale, "ndim", 0) > 0


def _column_scales(rq: dict[str, Any], n_cols: int) -> list[float]:
    """`[requant_scale(rq, j) for j in range(n_cols)]`, read at once."""
    if not _per_column(rq):
        return [requant_scale(rq)] * n_cols
    return np.asarray(rq["scale"], dtype=np.float64).reshape(-1)[:n_cols].tolist()


def _stage_out(site: Site, stage: int) -> str:
    if stage == -1:
        return site.compute.attrs["requant"]["out"]
    return site.chain[stage].attrs["out"]


def requant_column_posts(rq: dict, n_cols: int, scheme: str) -> ColumnPosts | None:
    """A per-channel requantization's posts on a float32 requantizer, one scale per column
    (`requant_from_scale`'s, converted at once); None for another scheme or where every
    column's float32 scale is one (then one post)."""
    if scheme != "float32":
        return None
    f32 = float32_scales(_column_scales(rq, n_cols))
    if len(set(f32)) == 1:
        return None
    return ColumnPosts(
        PostProcess(RequantParams("float32", int(rq["zp"]), rq["out"], scale=f32[0])), f32
    )


def requant_posts(
    rq: dict, groups: list[tuple[int, ...]], n_cols: int, scheme: str
) -> list[PostProcess | None]:
    """Each column's post, one per group of columns sharing a scale (`KernelError` where the
    requantizer cannot take one)."""
    posts: list[PostProcess | None] = [None] * n_cols
    for cols in groups:
        p = PostProcess(requant_from_scale(requant_scale(rq, cols[0]), rq["zp"], rq["out"], scheme))
        for j in cols:
            posts[j] = p
    return posts
