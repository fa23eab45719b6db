"""QuantizeLinear / DequantizeLinear: alone they run on the host (ONNX Runtime interprets
them); a DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear group is one `lut` table,
and a DequantizeLinear(s) -> MatMul|Gemm -> QuantizeLinear group one host float matmul.

Versions read: QuantizeLinear and DequantizeLinear 10 (no attributes), 13 (`axis`), 19
(QuantizeLinear `saturate`), 21 (`block_size`, QuantizeLinear `output_dtype`), 23
(QuantizeLinear `precision`, DequantizeLinear `output_dtype`); 24, 25 and 28 add element
types only (checked here). A group forms only at a version both converters claim.
"""

from __future__ import annotations

from typing import Any, cast

import onnx

from compiler.ort.tables import QDQ_FUNCTIONS

from ..context import BuildContext
from ..elem_types import DTYPES, EIGHT_BIT, QDQ_SCALE_TYPES, type_name
from ..f16_context import decorated_groups, ort_dequantize_types
from ..registry import REGISTRY, converter, opset_version
from . import unary_region
from .elementwise import lut

Q_ATTRIBUTES = ("axis", "block_size", "output_dtype", "saturate", "precision")
DQ_ATTRIBUTES = ("axis", "block_size", "output_dtype")


@converter("", "QuantizeLinear", since=10, attributes=Q_ATTRIBUTES)
@converter("", "DequantizeLinear", since=10, attributes=DQ_ATTRIBUTES)
def quantize_linear(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """A QuantizeLinear or DequantizeLinear outside a group: ONNX Runtime runs it."""
    ctx.host([n])


def qdq_groups(ctx: BuildContext) -> dict[str, tuple[str, list[onnx.NodeProto]]]:
    """Map the name of each group's final QuantizeLinear to (kind, nodes of the group)."""
    version = opset_version(ctx.opsets, "")
    if not all(REGISTRY.lookup("", op, version) for op in ("QuantizeLinear", "DequantizeLinear")):
        return {}  # Q/DQ of an opset no converter has read: each node is converted alone
    prod = ctx.producer_map()
    groups: dict[str, tuple[str, list[onnx.NodeProto]]] = {}
    found = unary_region.regions(ctx)
    st = unary_region.state(ctx)
    in_region = {id(m) for r in found if r.refusal is None for m in r.members}
    for r in found:
        if r.refusal is None:
            key = r.members[-1].name or r.members[-1].output[0]
            groups[key] = ("act", r.members)
            st.accepted[key] = r
    unary_region.prefetch(ctx, found)
    # float16 groups as ORT runs them, with its float32 casts (the integer QDQ reading)
    for out, (members, dq_type) in decorated_groups(ctx.m.graph, ctx.single_use).items():
        if any(id(m) in in_region for m in members):
            continue
        q = members[-1]
        groups[q.name or q.output[0]] = ("act", members)
        ctx.f16_dq_types[out] = dq_type
    for q in ctx.m.graph.node:
        if q.output and q.output[0] in ctx.f16_dq_types:
            continue
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx"):
            continue
        mid = prod.get(q.input[0])
        if mid is None or not ctx.single_use(q.input[0]):
            continue
        if mid.op_type in QDQ_FUNCTIONS and mid.domain in ("", "ai.onnx"):
            dq = prod.get(mid.input[0])
            if (
                dq is not None
                and dq.op_type == "DequantizeLinear"
                and dq.input[0] not in ctx.consts
            ):
                if ctx.single_use(mid.input[0]) and not {id(dq), id(mid), id(q)} & in_region:
                    groups[q.name or q.output[0]] = ("act", [dq, mid, q])
        elif mid.op_type in ("MatMul", "Gemm") and mid.domain in ("", "ai.onnx"):
            members = [mid, q]
            ok = True
            for i in mid.input:
                p = prod.get(i)
                if p is not None and p.op_type == "DequantizeLinear" and ctx.single_use(i):
                    members.insert(0, p)
                elif i not in ctx.consts:
                    ok = False
            if ok and any(p.op_type == "DequantizeLinear" for p in members):
                pos = {id(n): i for i, n in enumerate(ctx.m.graph.node)}
                members.sort(key=lambda n: pos[id(n)])
                groups[q.name or q.output[0]] = ("matmul", members)
    # a refused region is reported on the IR node of its first node (`qdq_activation`)
    for r in found:
        if r.refusal is None or r.anchor is None or id(r.anchor) in in_region:
            continue
        key = next((k for k, (_, ns) in groups.items() if r.anchor in ns), None)
        if key is None:
            key = r.anchor.name or r.anchor.output[0]
            groups[key] = ("act", [r.anchor])
        if groups[key][0] == "act":
            st.marks.setdefault(key, r.refusal)
    return groups


def qdq_activation(ctx: BuildContext, members: list[onnx.NodeProto]) -> None:
    """A unary region (`unary_region.convert`); a refused region's first node, converted as
    usual and marked with the refusal (`region_refusal`, read by the proposal and
    legality passes); else `_qdq_activation`."""
    key = members[-1].name or members[-1].output[0]
    st = unary_region.state(ctx)
    region = st.accepted.get(key)
    if region is not None:
        return unary_region.convert(ctx, region)
    mark = st.marks.get(key)
    if mark is None:
        return _qdq_activation(ctx, members)
    before = len(ctx.nodes)
    if len(members) == 1:
        cast(Any, ctx).convert(members[0])  # the builder's dispatch (reader._Builder)
    else:
        _qdq_activation(ctx, members)
    if len(ctx.nodes) > before:
        code, message = mark
        ctx.nodes[-1].attrs["region_refusal"] = {"code": code.value, "message": message}


def _qdq_activation(ctx: BuildContext, members: list[onnx.NodeProto]) -> None:
    """DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear as one table.

    Interprets opsets 13 to 23+: `axis` (per-tensor scales only: a per-axis scale is
    rejected), `block_size` (0 only), `output_dtype` (QuantizeLinear: the output type
    when there is no zero point; DequantizeLinear-23: must be the scale type),
    `saturate` (float8 only, and float8 is rejected) and `precision` (the scale type).
    """
    dq, q = members[0], members[-1]
    act = next(m for m in members if m.op_type in QDQ_FUNCTIONS)
    da, qa = ctx.attrs(dq), ctx.attrs(q)
    ctx.attrs(act)
    for node, a in ((dq, da), (q, qa)):
        if int(a.get("block_size", 0)) != 0:
            raise ctx.fail(node, "attribute 'block_size' (blocked quantization) is not supported")
    it = ctx.expect_dtype(dq, dq.input[0], EIGHT_BIT)
    x = ctx.value(dq, dq.input[0])
    xs, xs_t = ctx.scale(dq, 1, "x_scale", tuple(QDQ_SCALE_TYPES.values()))
    ys, ys_t = ctx.scale(q, 1, "y_scale", tuple(QDQ_SCALE_TYPES.values()))
    dq_type = ctx.f16_dq_types.get(q.output[0])
    if dq_type is None and xs_t != ys_t:
        raise ctx.fail(q, f"y_scale has type {ys_t}, x_scale {xs_t}; mixed types unsupported")
    for node, attr, t in ((dq, "output_dtype", xs_t), (q, "precision", ys_t)):
        a = (da if node is dq else qa).get(attr, 0)
        scale_tp = {v: k for k, v in QDQ_SCALE_TYPES.items()}[t]
        if int(a) not in (0, scale_tp):
            raise ctx.fail(
                node,
                f"attribute '{attr}' = {type_name(a)} differs from the scale type "
                f"{t}; not supported",
            )
    xz = int(ctx.scalar(dq, 2, "x_zero_point", default=0))
    yz_arr = ctx.const(q, 2, "y_zero_point", optional=True)
    out_dtype = int(qa.get("output_dtype", 0))
    if yz_arr is not None:
        ot = yz_arr.dtype.name
        yz = int(yz_arr.reshape(()).item()) if yz_arr.size == 1 else None
        if yz is None:
            raise ctx.fail(q, "y_zero_point must be a scalar (per-tensor)")
    else:
        ot = DTYPES.get(out_dtype, type_name(out_dtype)) if out_dtype else "uint8"
        yz = 0
    if ot not in EIGHT_BIT:
        why = "y_zero_point" if yz_arr is not None else "attribute 'output_dtype'"
        raise ctx.fail(q, f"output type {ot} ({why}) not supported; supported: int8, uint8")
    if out_dtype and DTYPES.get(out_dtype) != ot:
        raise ctx.fail(
            q, f"attribute 'output_dtype' = {type_name(out_dtype)} but y_zero_point is {ot}"
        )
    # QuantizeLinear-23 divides in `precision`, by default the scale's type.
    q_version = ctx.opsets.get("", ctx.opsets.get("ai.onnx", 0))
    precision = ys_t if q_version >= 23 else "float32"
    if ys_t == "float16":
        # written with casts or not, the group means what ORT runs (it may move casts)
        ort_type = ort_dq_type(ctx, q)
        if dq_type not in (None, ort_type):
            raise ctx.fail(
                q,
                f"ONNX Runtime runs this float16 QDQ group's DequantizeLinear in {ort_type}, "
                f"not the {dq_type} its casts say; not supported",
            )
        dq_type = ort_type
    lut(
        ctx,
        q,
        members,
        x,
        QDQ_FUNCTIONS[act.op_type],
        "qdq",
        float(xs),
        xz,
        it,
        float(ys),
        yz,
        ot,
        None,
        op_type=act.op_type,
        scale_type=ys_t,
        quantize_precision=precision,
        dequantize_type=dq_type,
    )


def ort_dq_type(ctx: BuildContext, q: onnx.NodeProto) -> str:
    """The DequantizeLinear output type ORT gives a float16 group in this model
    (`compiler.frontend.f16_context`), else an error naming `q`.

    The float QDQ reading names ORT's level off. The integer reading names its default
    level, but counterexamples are replayed at level off: the two must agree.
    """
    if ctx.ort_dq_types is None:
        integer = str(getattr(ctx.reference, "qdq_reading", "float")) == "integer"
        levels = ("default", "off") if integer else ("off",)
        ctx.ort_dq_types = [ort_dequantize_types(ctx.m, lv) for lv in levels]
    found = []
    for types in ctx.ort_dq_types:
        t = types.get(q.output[0])
        if t is None and q.name:
            t = types.get(f"node:{q.name}")
        found.append(t)
    if None in found:
        raise ctx.fail(
            q,
            "ONNX Runtime casts this float16 QDQ group to float32 in a way the tool does "
            "not model (compiler.frontend.f16_context); not supported",
        )
    if len(set(found)) > 1:
        raise ctx.fail(
            q,
            "ONNX Runtime computes this float16 QDQ group differently at optimisation "
            "levels default and off (it rounds the dequantized value to float16 at one "
            "only); not supported",
        )
    return str(found[0])
