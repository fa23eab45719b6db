"""QDQ groups read the integer way: the graph ONNX Runtime's own QDQ transformers produce.

At its default optimisation level ORT rewrites DequantizeLinear -> op -> QuantizeLinear
groups into integer kernels before running them: DQ -> MatMul -> Q becomes QLinearMatMul,
DQ -> Gemm (int32 bias DQ) -> Q becomes com.microsoft QGemm, DQ -> Add -> Q QLinearAdd,
DQ -> Sigmoid -> Q QLinearSigmoid, and on x86-64 builds (`QDQIsInt8Allowed()` is false
there at compile time) int8 activations are first moved to uint8 with the zero point
plus 128, after which some groups (an int8 QLinearAdd) are left as float ops. Which
groups it rewrites is ORT's decision, so rather than re-deriving its selector rules this
module asks ORT for the rewritten graph (`ORT_ENABLE_EXTENDED`, where the QDQ transformers
and the float fusions run; the default `ORT_ENABLE_ALL` adds only the CPU-dependent layout
rewrites, which host steps get by running at that level) and the frontend reads that
QOperator graph with its usual, exact handlers. Node names are
ORT's: the rewritten op keeps the name of the group's compute node (e.g. "MatMul").

The rewrite depends only on the ORT build's architecture (x86-64 here; ARM64 keeps int8,
which is numerically the same shift by 128), not on the CPU features of the machine.

ONNX Runtime cannot load a model that holds the project's own ops (`ai.npufusion`), so
such a model means: ORT runs the standard ops around each project op and the project's
kernel runs in between. Its integer reading is read the same way: the project ops are cut
out (their outputs become graph inputs, their inputs graph outputs), ORT rewrites the rest,
and the project ops are put back between the rewritten parts.
"""

from __future__ import annotations

from collections import Counter

import onnx

from compiler.errors import FrontendError

from .f16_context import PROJECT_DOMAIN, ort_graph, without_project_ops
from .overridable import constant_initializers

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def has_qdq_groups(m: onnx.ModelProto) -> bool:
    """Whether some DequantizeLinear reads a non-constant (an activation of a QDQ group,
    or an overridable initializer, which ORT does not treat as constant either)."""
    consts = {i.name for i in constant_initializers(m)}
    return any(
        n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx") and n.input[0] not in consts
        for n in m.graph.node
    )


# ops whose inputs and outputs are integer tensors (scales and zero points aside): a graph
# of only these, fed integer inputs, has no float computation for ORT to rewrite
INTEGER_OPS = frozenset(
    {
        "QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger", "QGemm", "QLinearAdd",
        "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearConcat",
        "QLinearGlobalAveragePool", "QLinearAveragePool", "Requantize", "Reshape", "Transpose",
        "Identity", "Flatten", "Squeeze", "Unsqueeze", "Clip", "MaxPool",
    }
)  # fmt: skip
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                         onnx.TensorProto.BFLOAT16})  # fmt: skip


def integer_only(m: onnx.ModelProto) -> bool:
    """Whether `m` computes on integers only: every node an `INTEGER_OPS` op of the ONNX,
    com.microsoft or project domain, and no float graph input."""
    inits = {i.name for i in m.graph.initializer}
    if any(
        vi.type.tensor_type.elem_type in FLOAT_TYPES for vi in m.graph.input if vi.name not in inits
    ):
        return False
    domains = ("", "ai.onnx", "com.microsoft", PROJECT_DOMAIN)
    return all(n.domain in domains and n.op_type in INTEGER_OPS for n in m.graph.node)


class DefaultSessionRefusal(FrontendError):
    """ONNX Runtime runs the model with optimisations off, but its default session's graph
    rewrite fails: the model has no reference meaning (bad input, named after the
    frontend's own refusals of the model, which come first)."""


def integer_reading(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model as the integer QDQ reading sees it (see the module docstring): the graph
    ORT's default session runs, whenever its rewrite runs other kernels than the graph as
    written (a model that computes on integers only is not asked about). That covers QDQ groups made integer kernels, and float rewrites that change
    rounding: a layer norm written out as ops fused into (Simplified)LayerNormalization, a
    QDQ float Conv whose float weights ORT quantizes (no integer kernel), com.microsoft
    kernels such as MatMulNBits. A rewrite that only removes Identity nodes keeps the graph as
    written (names and structure the user wrote), and so do the casts ORT's CPU provider
    inserts at every level, level off included; so does a model ORT cannot load (the
    frontend names what it cannot read). CPU-dependent layout rewrites of the default level
    (NCHWc for float convs, NHWC for QLinearConv) are not read here: host steps run at the
    default session's level, where ORT makes them on the CPU that runs the program.
    """
    if not has_qdq_groups(m) and integer_only(m):
        return m
    project = [n for n in m.graph.node if n.domain == PROJECT_DOMAIN]
    base = without_project_ops(m) if project else m
    data = base.SerializeToString()
    try:
        r = ort_integer_model(base, data)
    except FrontendError as e:
        try:
            _graph_off(data)
        except FrontendError:
            return m  # ORT cannot run it at all: the frontend names what it cannot read
        # ORT's own rewrite breaks the model: no reference meaning
        raise DefaultSessionRefusal(
            "ONNX Runtime loads the model with optimisations off but its default session "
            f"refuses it (its graph rewrite fails): {str(e).split(': ', 1)[-1]}"
        ) from None
    if not computes_differently(base, r):
        # Level off sits between the two: the casts it inserts and the Constant nodes it
        # makes initializers, the default level makes too, so it runs these kernels as well.
        return m
    # Level off makes no integer kernel of a QDQ group (ORT's QDQ transformers run from
    # level basic on): a rewrite that made more of one than the graph has computes
    # differently from level off too, without asking it (one session fewer).
    if not _integer_kernels_made(base, r):
        off = _graph_off(data)
        if not computes_differently(off, r) and not drops_values(m, off):
            return m
    return splice_project_ops(r, m, project) if project else r


def _graph_off(data: bytes) -> onnx.ModelProto:
    """What ORT runs with optimisations off: the graph plus the casts its CPU provider
    inserts at every level (float16 ops it has no kernel for run in float32)."""
    return onnx.load_from_string(ort_graph(data, "off", "QDQ groups"))


# the kernels ORT's QDQ transformers make of QDQ groups (its qdq_selector_action_transformer)
_QDQ_KERNELS = frozenset({"QGemm", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"})


def _integer_kernels_made(m: onnx.ModelProto, r: onnx.ModelProto) -> bool:
    """Whether rewrite `r` of `m` has more of some QDQ-transformer kernel (a QLinear op,
    QGemm, ...) than `m` has."""

    def count(g: onnx.ModelProto) -> Counter[tuple[str, str]]:
        return Counter(
            (n.domain or "", n.op_type)
            for n in g.graph.node
            if n.op_type.startswith("QLinear") or n.op_type in _QDQ_KERNELS
        )

    return bool(count(r) - count(m))


def splice_project_ops(
    r: onnx.ModelProto, m: onnx.ModelProto, project: list[onnx.NodeProto]
) -> onnx.ModelProto:
    """ORT's rewrite `r` of `m` without its project ops, with those ops put back.

    The cut made each project output a graph input of `r` and each project input a graph
    output; both are undone, the nodes are ordered topologically again, and the graph
    inputs and outputs are `m`'s own.
    """
    out = onnx.ModelProto()
    out.CopyFrom(r)
    g = out.graph
    produced_by_project = {o for n in project for o in n.output}
    original_inputs = {vi.name for vi in m.graph.input}
    original_outputs = [vi.name for vi in m.graph.output]
    inputs = [
        vi for vi in g.input if vi.name not in produced_by_project or vi.name in original_inputs
    ]
    del g.input[:]
    g.input.extend(inputs)
    by_name = {vi.name: vi for vi in [*r.graph.output, *m.graph.output]}
    del g.output[:]
    g.output.extend(by_name[o] for o in original_outputs)
    g.node.extend(project)
    nodes = _topological(
        list(g.node), {vi.name for vi in g.input} | {i.name for i in g.initializer}
    )
    del g.node[:]
    g.node.extend(nodes)
    have = {o.domain for o in out.opset_import}
    out.opset_import.extend(o for o in m.opset_import if o.domain not in have)
    return out


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """`nodes` ordered so each reads only values already available (stable otherwise)."""
    have = set(available) | {""}
    todo, done = list(nodes), []
    while todo:
        ready = [n for n in todo if all(i in have for i in n.input)]
        if not ready:
            names = ", ".join(n.name or n.op_type for n in todo[:3])
            raise FrontendError(f"the rewritten graph has a cycle or a missing value near {names}")
        for n in ready:
            done.append(n)
            have.update(n.output)
        ready_ids = {id(n) for n in ready}
        todo = [n for n in todo if id(n) not in ready_ids]
    return done


def ort_integer_model(m: onnx.ModelProto, data: bytes | None = None) -> onnx.ModelProto:
    """`m` after ONNX Runtime's QDQ transformers (its default-level integer kernels);
    `data`: `m` serialised, where the caller has it.

    Opset imports the rewritten graph does not use are dropped. Raises `FrontendError`
    when ONNX Runtime cannot load the model.
    """
    data = m.SerializeToString() if data is None else data
    r = onnx.load_from_string(ort_graph(data, "extended", "QDQ groups"))
    used = {n.domain or "" for n in r.graph.node} | {""}
    keep = [o for o in r.opset_import if (o.domain or "") in used]
    del r.opset_import[:]
    r.opset_import.extend(keep)
    return r


def float_reading(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model as the float QDQ reading (ORT with optimisations off) runs it: `m` as
    written, unless ORT's cast insertion drops a value across ops (`drops_values`; only a
    model with float16 tensors is asked), then the graph ORT runs at level off."""
    g = m.graph
    typed = [*g.input, *g.value_info, *g.output]
    if not any(vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for vi in typed):
        return m
    if any(n.domain == PROJECT_DOMAIN for n in g.node):
        return m
    try:
        off = onnx.load_from_string(ort_graph(m.SerializeToString(), "off", "float16 casts"))
    except FrontendError:
        return m
    return off if drops_values(m, off) else m


def drops_values(m: onnx.ModelProto, off: onnx.ModelProto) -> bool:
    """Whether ORT with optimisations off no longer computes a value `m` computes: its
    cast insertion removed a node across ops (a Cast to float16 before an op it runs in
    float32 is dropped with the cast back it inserts), so hosting `m`'s nodes one by one
    would round where ORT does not."""
    g = off.graph
    made = {o for n in g.node for o in n.output} | {i.name for i in g.initializer}
    made |= {i.values.name for i in g.sparse_initializer}
    computed = [n for n in m.graph.node if n.op_type != "Constant"]  # ORT makes initializers
    return any(o and o not in made for n in computed for o in n.output)


def _signature(m: onnx.ModelProto) -> list[tuple[str, str]]:
    """(domain, op type) of every node but Identity (which computes nothing)."""
    return sorted((n.domain or "", n.op_type) for n in m.graph.node if n.op_type != "Identity")


def computes_differently(m: onnx.ModelProto, r: onnx.ModelProto) -> bool:
    """Whether ORT's rewrite `r` of `m` runs other kernels than `m` as written (any op
    added, removed or fused, constants folded into initializers included)."""
    return _signature(m) != _signature(r)
