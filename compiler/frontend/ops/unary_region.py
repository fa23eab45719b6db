"""Unary regions: the largest elementwise subgraph that is one function of one 8-bit value.

From a quantized tensor U (a compute op's output, or any other 8-bit tensor), a region
takes every elementwise node whose inputs are U, values the region computes, or
single-value constants: QDQ float islands (DequantizeLinear -> HardSigmoid, HardSwish,
Sigmoid, Tanh, Mul, Add, Sub, Div, Erf, Relu, Clip, LeakyRelu, Gelu, ... ->
QuantizeLinear) and the QOperator ops (com.microsoft QLinearSigmoid, QLinearLeakyRelu,
QLinearMul / QLinearAdd whose other operand is U, a region value or a constant), chained.
A float value whose user is outside the region is cut off (the region ends at its last
8-bit values). What remains must have exactly one value used outside, an 8-bit tensor
Y: then it is one `lut` node whose table is what ONNX Runtime computes for each code
(`compiler.ort.region_table`, with its position-independence check). Two uses of U inside
the region (SiLU's `Mul(U, Sigmoid(U))`) are still one function of U.

A region that is exactly what a single converter already reads with a modelled kernel
(one QLinearSigmoid / QLinearLeakyRelu / QLinearAdd / QLinearMul with a constant, or
DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear) is left to that converter.

Refusals, for a U a compute op produced (they become rejected sites with their reason,
`compiler.passes.legality`): a region value also used outside (`multiple_users`); an op
taking a second non-constant input or a constant of several values
(`region_second_input`); a reduction or data-movement op inside (`region_reduction`);
16-bit codes (`unsupported_intermediate_type`); ORT computing a code differently by
position (`region_position_dependent`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx

from compiler.ir.graph import Node, Value
from compiler.ort.region_table import (
    Key,
    RegionError,
    checked,
    prefetch_unchecked,
    quick_table,
    region_model,
    region_table,
)
from compiler.ort.region_table import prefetch as region_prefetch
from prover.lut import LOADED_TABLE
from prover.verdict import ReasonCode

from ..context import BuildContext

MS = "com.microsoft"
FLOAT_OPS = frozenset(
    {
        "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Mul", "Add", "Sub", "Div", "Erf",
        "Relu", "Clip", "LeakyRelu", "Gelu", "Elu", "Selu", "Celu", "Softplus", "Softsign",
        "Neg", "Abs", "Exp", "Log", "Sqrt", "Pow", "Identity", "Mish", "ThresholdedRelu",
        "PRelu", "Reciprocal", "Max", "Min",
    }
)  # fmt: skip
MS_FLOAT_OPS = frozenset({"Gelu", "FastGelu", "QuickGelu"})
QLINEAR_OPS = {"QLinearSigmoid": "Sigmoid", "QLinearLeakyRelu": "LeakyRelu",
               "QLinearMul": "Mul", "QLinearAdd": "Add"}  # fmt: skip
QUANTIZED_OUT = frozenset({"QuantizeLinear", *QLINEAR_OPS})
REDUCTION_OR_MOVEMENT = frozenset(
    {
        "Softmax", "LogSoftmax", "Hardmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
        "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
        "ReduceSumSquare", "LayerNormalization", "SimplifiedLayerNormalization",
        "SkipLayerNormalization", "InstanceNormalization", "GroupNormalization",
        "LpNormalization", "MeanVarianceNormalization", "GlobalAveragePool", "GlobalMaxPool",
        "AveragePool", "MaxPool", "CumSum", "ArgMax", "ArgMin", "TopK", "QLinearSoftmax",
        "QLinearGlobalAveragePool", "QLinearAveragePool", "Transpose", "Reshape", "Flatten",
        "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "GatherElements",
        "GatherND", "Expand", "Tile", "Pad", "Resize", "DepthToSpace", "SpaceToDepth",
        "QLinearConcat", "ReverseSequence", "Compress",
    }
)  # fmt: skip
COMPUTE_OPS = frozenset({"QLinearConv", "QLinearMatMul", "QGemm"})
SIMPLE_QDQ = frozenset({"Sigmoid", "Tanh", "Relu"})
EIGHT = ("int8", "uint8")
SIXTEEN = ("int16", "uint16")


@dataclass
class Region:
    """A unary region found from `u`: its nodes (graph order), or why it is refused."""

    u: str
    members: list[onnx.NodeProto] = field(default_factory=list)
    y: str = ""
    refusal: tuple[ReasonCode, str] | None = None
    anchor: onnx.NodeProto | None = None  # the node a refusal is reported on


@dataclass
class RegionState:
    """What the frontend knows of regions while reading one model."""

    types: dict[str, str] = field(default_factory=dict)  # value -> element type name
    accepted: dict[str, Region] = field(default_factory=dict)  # group key -> region
    marks: dict[str, tuple[ReasonCode, str]] = field(default_factory=dict)  # key -> refusal
    # lut nodes emitted with ORT's table before their position check (`resolve`), and the
    # region models an earlier build of this model found not to be one table
    pending: list[tuple[Node, Key, str]] = field(default_factory=list)
    failed: dict[Key, RegionError] = field(default_factory=dict)


def state(ctx: BuildContext) -> RegionState:
    """The region state of this model's conversion (created on first use)."""
    st = ctx.__dict__.setdefault("_unary_regions", RegionState())
    assert isinstance(st, RegionState)
    return st


def _key(n: onnx.NodeProto) -> str:
    return n.name or n.output[0]


def _label(ns: Iterable[onnx.NodeProto]) -> str:
    return ", ".join(f"'{_key(n)}'" for n in ns)


def _dom(n: onnx.NodeProto) -> str:
    return "" if n.domain in ("", "ai.onnx") else n.domain


def elementwise(n: onnx.NodeProto) -> bool:
    """Whether `n` is an op a region may hold."""
    d = _dom(n)
    if d == "":
        return n.op_type in FLOAT_OPS or n.op_type in ("QuantizeLinear", "DequantizeLinear")
    return d == MS and (n.op_type in MS_FLOAT_OPS or n.op_type in QLINEAR_OPS)


def _blocked(n: onnx.NodeProto) -> bool:
    a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
    return int(a.get("block_size", 0)) != 0


def find(ctx: BuildContext, u: str, order: dict[int, int]) -> Region:
    """The largest region from `u` (module docstring)."""
    r = Region(u)
    inside: set[str] = {u}
    floats: set[str] = set()  # region values in float (DequantizeLinear or float op outputs)
    members: list[onnx.NodeProto] = []
    outside_reason: list[tuple[ReasonCode, str]] = []
    nodes = ctx.m.graph.node
    heap = sorted({order[id(n)] for n in ctx.onnx_users.get(u, [])})
    seen = set(heap)
    while heap:
        n = nodes[heapq.heappop(heap)]
        ins = [i for i in n.input if i]
        bad = [i for i in ins if i not in inside and not _single_const(ctx, i)]
        if elementwise(n) and not bad and not _blocked(n) and _typed(n, ins, inside, floats):
            members.append(n)
            for o in n.output:
                if not o:
                    continue
                inside.add(o)
                if n.op_type not in QUANTIZED_OUT:
                    floats.add(o)
                for x in ctx.onnx_users.get(o, []):
                    if order[id(x)] not in seen:
                        seen.add(order[id(x)])
                        heapq.heappush(heap, order[id(x)])
            continue
        if n.op_type in REDUCTION_OR_MOVEMENT:
            outside_reason.append(
                (
                    ReasonCode.REGION_REDUCTION,
                    f"{_label([n])} ({n.op_type}) reduces or moves elements",
                )
            )
        elif elementwise(n) and bad:
            what = [
                f"'{i}' (a constant of {ctx.consts[i].size} values)"
                if i in ctx.consts
                else f"'{i}'"
                for i in bad
            ]
            outside_reason.append(
                (
                    ReasonCode.REGION_SECOND_INPUT,
                    f"{_label([n])} ({n.op_type}) also takes {', '.join(what)}",
                )
            )
    members = _close(ctx, members, u)
    r.members = members
    first = next((n for n in ctx.onnx_users.get(u, []) if elementwise(n)), None)
    r.anchor = members[0] if members else first
    if not members:
        if outside_reason and first is not None and first.op_type == "DequantizeLinear":
            code, msg = outside_reason[0]
            r.refusal = (code, f"the region after '{u}' cannot close: {msg}")
        return r
    mine = {id(m) for m in members}
    outs = []
    for m in members:
        for o in m.output:
            users = [x for x in ctx.onnx_users.get(o, []) if id(x) not in mine]
            if o and (users or o in ctx.graph_outputs):
                outs.append((o, m, users))
    if len(outs) != 1:
        o, m, users = outs[0] if len(outs) > 1 else ("", members[-1], [])
        who = [_label(users)] if users else []
        if o in ctx.graph_outputs:
            who.append("a graph output")
        r.refusal = (
            ReasonCode.MULTIPLE_USERS,
            f"value '{o}' of {_label([m])} inside the region after '{u}' is also used by "
            f"{' and '.join(who)}",
        )
        return r
    r.y = outs[0][0]
    t = state(ctx).types.get(u)
    if t in SIXTEEN:
        r.refusal = (
            ReasonCode.UNSUPPORTED_INTERMEDIATE_TYPE,
            f"the region {_label(members)} reads 16-bit codes of '{u}' ({t}): it is a "
            "65536-entry table",
        )
    return r


def _typed(n: onnx.NodeProto, ins: list[str], inside: set[str], floats: set[str]) -> bool:
    """Whether `n` reads the region's values in the type it computes on: a DequantizeLinear
    or a QLinear op reads codes, a float op or a QuantizeLinear floats (an integer Clip of
    codes is not a float op: it stays the epilogue's clip stage)."""
    mine = [i for i in ins if i in inside]
    if n.op_type == "DequantizeLinear" or n.op_type in QLINEAR_OPS:
        return not any(i in floats for i in mine)
    return all(i in floats for i in mine)


def _single_const(ctx: BuildContext, name: str) -> bool:
    return name in ctx.consts and ctx.consts[name].size == 1


def _close(ctx: BuildContext, members: list[onnx.NodeProto], u: str) -> list[onnx.NodeProto]:
    """Drop members until no float value leaves the region, no member is dead and every
    member reads only `u`, values of members kept, or single-value constants."""
    while True:
        mine = {id(m) for m in members}
        inside = {u, *(o for m in members for o in m.output if o)}
        keep = []
        for m in members:
            if any(i and i not in inside and not _single_const(ctx, i) for i in m.input):
                continue  # its producer was dropped
            outs = [o for o in m.output if o]
            users = [[x for x in ctx.onnx_users.get(o, [])] for o in outs]
            leaves = any(
                any(id(x) not in mine for x in us) or o in ctx.graph_outputs
                for o, us in zip(outs, users, strict=True)
            )
            dead = not any(users) and not any(o in ctx.graph_outputs for o in outs)
            quantized = m.op_type in QUANTIZED_OUT
            if (leaves and not quantized) or dead:
                continue
            keep.append(m)
        if len(keep) == len(members):
            return members
        members = keep


def simple(members: list[onnx.NodeProto], u: str) -> bool:
    """A region that is a chain of what single converters read with modelled kernels (a
    QLinearSigmoid / QLinearLeakyRelu / QLinearAdd / QLinearMul with a constant, a
    DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear): left to them (two tables in a
    row compose only as a proven rewrite, `compose_tables`)."""
    produced = {u, *(o for m in members for o in m.output)}
    uses: dict[str, int] = {}
    for m in members:
        for i in m.input:
            if i in produced:
                uses[i] = uses.get(i, 0) + 1
        if m.op_type in ("QLinearMul", "QLinearAdd"):
            if sum(1 for i in (m.input[0], m.input[3]) if i in produced) > 1:
                return False
            if _dom(m) != MS:
                return False
        elif m.op_type in ("QLinearSigmoid", "QLinearLeakyRelu"):
            if _dom(m) != MS:
                return False
        elif m.op_type not in ("DequantizeLinear", "QuantizeLinear", *SIMPLE_QDQ):
            return False
    if any(k > 1 for k in uses.values()):
        return False  # a value used twice: not a chain
    ops = [m.op_type for m in members]
    n_float = sum(o in SIMPLE_QDQ for o in ops)
    return ops.count("DequantizeLinear") == n_float == ops.count("QuantizeLinear")


def regions(ctx: BuildContext) -> list[Region]:
    """Every region worth a table or a reported refusal, from every 8-bit/16-bit tensor."""
    order = {id(n): i for i, n in enumerate(ctx.m.graph.node)}
    producers = ctx.producer_map()  # one look-up table: a scan of the graph per start was 0.1 s
    state(ctx).types = value_types(ctx.m)
    starts = [vi.name for vi in ctx.m.graph.input if vi.name not in ctx.consts]
    starts += [o for n in ctx.m.graph.node for o in n.output if o]
    out: list[Region] = []
    claimed: set[int] = set()
    for u in starts:
        if state(ctx).types.get(u) not in EIGHT + SIXTEEN or u in ctx.consts:
            continue
        if not any(elementwise(n) for n in ctx.onnx_users.get(u, [])):
            continue
        r = find(ctx, u, order)
        if any(id(m) in claimed for m in r.members):
            continue
        if r.refusal is not None:
            p = producers.get(u)
            if p is not None and _from_compute(producers, p) and r.anchor is not None:
                out.append(r)
            continue
        if r.members and not simple(r.members, r.u):
            claimed.update(id(m) for m in r.members)
            out.append(r)
    return out


def value_types(m: onnx.ModelProto) -> dict[str, str]:
    """Element type names of the model's values (the frontend reads a shape-inferred model,
    `compiler.frontend.checked`; unknown: absent)."""
    from ..elem_types import DTYPES

    g = m.graph
    if not g.value_info and len(g.node) > 1:
        try:
            g = onnx.shape_inference.infer_shapes(m).graph
        except Exception:  # noqa: BLE001 - no inference: only declared types are known
            pass
    out = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        t = DTYPES.get(vi.type.tensor_type.elem_type)
        if t is not None:
            out[vi.name] = t
    inits = {i.name: DTYPES.get(i.data_type) for i in m.graph.initializer}
    for n in m.graph.node:  # values inference left untyped: the type a node states
        if n.output and n.output[0] not in out:
            t = _stated_type(n, inits)
            if t is not None:
                out[n.output[0]] = t
    return out


# com.microsoft quantized ops: the input whose type is their output's (the y zero point)
_OUT_ZP = {"QGemm": 8, "QLinearConv": 7, "QLinearMatMul": 7, **dict.fromkeys(QLINEAR_OPS, 7)}
_OUT_ZP |= {"QLinearSigmoid": 4, "QLinearLeakyRelu": 4}


def _stated_type(n: onnx.NodeProto, inits: dict[str, str | None]) -> str | None:
    """The output type a quantized op states by its output zero point (QLinearConv,
    QLinearMatMul, com.microsoft QGemm and QLinear ops) or attribute (ai.npufusion Requantize's `output_type`), or None."""
    if n.domain == "ai.npufusion" and n.op_type == "Requantize":
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        t = a.get("output_type", b"int8")
        return t.decode() if isinstance(t, bytes) else str(t)
    k = _OUT_ZP.get(n.op_type)
    # (a QLinearMatMul's untyped output is left alone: ORT's rewrite of a QDQ MatMul with a
    # float bias group is read by the float-bias rule, `compiler.ir.float_bias`)
    ours = _dom(n) == MS or _dom(n) == "" and n.op_type == "QLinearConv"
    if not ours or k is None or len(n.input) <= k or not n.input[k]:
        return None
    return inits.get(n.input[k])


def _from_compute(producers: dict[str, onnx.NodeProto], p: onnx.NodeProto) -> bool:
    if p.op_type in COMPUTE_OPS:
        return True
    if p.op_type == "QuantizeLinear":
        q = producers.get(p.input[0])
        return q is not None and q.op_type in ("Conv", "MatMul", "Gemm")
    return False


def kind(members: list[onnx.NodeProto]) -> str:
    """The NPU function the region's table is (the target's toolchain builds that one and the
    gate proves it equal to ORT's table); `LOADED_TABLE` ("table": a target that declares
    it loads ORT's table as given) when it is none of the named ones."""
    if sum(m.op_type in QUANTIZED_OUT for m in members) > 1:
        return LOADED_TABLE  # requantized inside: no named function is this table
    ops = [QLINEAR_OPS.get(m.op_type, m.op_type) for m in members]
    ops = [o for o in ops if o not in ("DequantizeLinear", "QuantizeLinear", "Identity")]
    s = sorted(ops)
    attrs = {
        id(m): {a.name: onnx.helper.get_attribute_value(a) for a in m.attribute} for m in members
    }
    if s == ["HardSigmoid"]:
        a = attrs[id(next(m for m in members if m.op_type == "HardSigmoid"))]
        ok = math.isclose(float(a.get("alpha", 0.2)), 1 / 6, rel_tol=1e-6)
        return "hardsigmoid" if ok and float(a.get("beta", 0.5)) == 0.5 else LOADED_TABLE
    if s == ["HardSwish"] or s == ["HardSigmoid", "Mul"] and _inlined_hardswish(members):
        return "hardswish"
    if s == ["Mul", "Sigmoid"]:
        return "silu"
    if s == ["Gelu"]:
        m = next(m for m in members if m.op_type == "Gelu")
        approx = attrs[id(m)].get("approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else str(approx)
        return "gelu_tanh" if approx == "tanh" else "gelu"
    if s == ["FastGelu"]:
        return "gelu_tanh"
    if "Erf" in s and len(s) >= 4:
        return "gelu"
    if "Tanh" in s and len(s) >= 5:
        return "gelu_tanh"
    if s in (["Sigmoid"], ["Tanh"], ["Relu"]):
        return s[0].lower()
    return LOADED_TABLE


def _inlined_hardswish(members: list[onnx.NodeProto]) -> bool:
    """`Mul(x, HardSigmoid(x; alpha=1/6, beta=0.5))`: HardSwish as ONNX defines it, the
    form ORT's session leaves after inlining the HardSwish function."""
    hs = next(m for m in members if m.op_type == "HardSigmoid")
    mul = next(m for m in members if m.op_type == "Mul")
    a = {x.name: onnx.helper.get_attribute_value(x) for x in hs.attribute}
    ok = math.isclose(float(a.get("alpha", 0.2)), 1 / 6, rel_tol=1e-6)
    return ok and float(a.get("beta", 0.5)) == 0.5 and set(mul.input) == {hs.input[0], hs.output[0]}


def _scale_zp(ctx: BuildContext, n: onnx.NodeProto, scale: int, zp: int) -> tuple[float, int]:
    s = float(ctx.scalar(n, scale, "scale"))
    z = int(ctx.scalar(n, zp, "zero point", default=0))
    return s, z


def _in_params(ctx: BuildContext, r: Region) -> tuple[float, int]:
    n = next(m for m in r.members if r.u in m.input)
    if n.op_type == "DequantizeLinear":
        return _scale_zp(ctx, n, 1, 2)
    if n.input[0] == r.u:
        return _scale_zp(ctx, n, 1, 2)
    return _scale_zp(ctx, n, 4, 5)  # QLinearMul/Add with U as operand B


def _out_params(ctx: BuildContext, r: Region) -> tuple[float, int]:
    n = r.members[-1]
    if n.op_type == "QuantizeLinear":
        return _scale_zp(ctx, n, 1, 2)
    if n.op_type in ("QLinearSigmoid", "QLinearLeakyRelu"):
        return _scale_zp(ctx, n, 3, 4)
    return _scale_zp(ctx, n, 6, 7)


def _blob(ctx: BuildContext, r: Region, in_type: str, rank: int) -> bytes:
    """The region's model (`region_model`), serialised."""
    consts = {}
    for m in r.members:
        for k, i in enumerate(m.input):
            if i and i not in {o for n in r.members for o in n.output} and i != r.u:
                consts[i] = ctx.const(m, k, f"input '{i}'")
    return region_model(r.members, consts, r.u, r.y, in_type, rank, ctx.opsets).SerializeToString()


def _level(ctx: BuildContext) -> str:
    return "default" if ctx.integer_reading else "off"


def prefetch(ctx: BuildContext, found: Iterable[Region]) -> None:
    """ORT's tables of the model's accepted regions in one run of them all
    (`region_table.prefetch_unchecked`), before any is converted, where the rank of a
    region's input can be guessed from the graph; the others get theirs from a run of their
    own when converted. Their position checks run at the end of the build (`resolve`)."""
    reqs = []
    ranks = _likely_ranks(ctx)
    for r in found:
        if r.refusal is not None or not r.members:
            continue
        in_type = state(ctx).types.get(r.u)
        rank = ranks.get(r.u)
        if in_type not in EIGHT or rank is None:
            continue
        try:
            reqs.append((_blob(ctx, r, in_type, rank), in_type, rank, _level(ctx)))
        except Exception:  # noqa: BLE001 - its conversion reports it
            continue
    if len(reqs) > 1:
        prefetch_unchecked(reqs)


def _likely_ranks(ctx: BuildContext) -> dict[str, int]:
    """Each value's rank as the model states it, else that of its producer's first input
    (graph order). Only a guess for `prefetch`: a wrong one makes another region model, so
    a table not found (the region is checked alone), never a wrong one."""
    ranks: dict[str, int] = {}
    for vi in [*ctx.m.graph.input, *ctx.inferred.values()]:
        if vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = max(1, len(vi.type.tensor_type.shape.dim))
    for n in ctx.m.graph.node:
        guess = ranks.get(n.input[0]) if n.input else None
        for o in n.output:
            if o and o not in ranks and guess is not None:
                ranks[o] = guess
    return ranks


def convert(ctx: BuildContext, r: Region) -> None:
    """Emit the region as one `lut` node (its table from ORT, position-checked)."""
    first = r.members[0]
    x = ctx.value(first, r.u)
    level = _level(ctx)
    what = f"the region {_label(r.members)}"
    try:
        rank = max(1, len(x.shape))
        blob = _blob(ctx, r, x.dtype, rank)
        key = (blob, x.dtype, rank, level)
        st = state(ctx)
        if key in st.failed:  # an earlier build of this model found it no table
            raise st.failed[key]
        done = checked(*key)
        if done is not None:  # checked already: the table is `region_table`'s
            table, ot = region_table(blob, x.dtype, rank, level, what), done.out_type
        else:
            table, ot = quick_table(*key, what)
    except RegionError as e:
        # not one table: ORT runs the region on the host; its site is refused with the reason
        ctx.host(r.members, placement=f"{what} runs on the host: {e.message}")
        ctx.nodes[-1].attrs["region_refusal"] = {"code": e.code.value, "message": e.message}
        return
    except Exception as e:  # noqa: BLE001 - ORT refuses the subgraph alone: host ops as written
        msg = " ".join(str(e).split())[:300]
        for m in r.members:
            ctx.unsupported(m, f"ONNX Runtime cannot run {what} alone: {msg}")
        return
    xs, xz = _in_params(ctx, r)
    ys, yz = _out_params(ctx, r)
    ctx.emit(
        "lut",
        r.members,
        [x.name],
        Value(r.y, ot, x.shape),
        table=table,
        in_type=x.dtype,
        out_type=ot,
        function=kind(r.members),
        in_scale=xs,
        in_zp=xz,
        out_scale=ys,
        out_zp=yz,
        source="region",
    )
    if done is None and not ctx.naming:  # its position check: `resolve`, with the others
        state(ctx).pending.append((ctx.nodes[-1], key, what))


def resolve(ctx: BuildContext) -> dict[Key, RegionError]:
    """Position-check the regions this build emitted before their check, all together
    (`region_table.prefetch`: one merged model), and give each `lut` its checked table.
    Returns the region models found not to be one table (with why), for which the model
    must be built again (`convert` then runs them on the host); empty when none."""
    st = state(ctx)
    pending, st.pending = st.pending, []
    if len(pending) > 1:
        region_prefetch([key for _, key, _ in pending])
    failed: dict[Key, RegionError] = {}
    for node, key, what in pending:
        blob, in_type, rank, level = key
        try:
            node.attrs["table"] = region_table(blob, in_type, rank, level, what)
        except RegionError as e:
            failed[key] = e
    return failed
