"""ONNX frontend: load, validate, and lower a quantized ONNX model to the integer IR.

The graph is walked by a dispatcher (`_Builder`) that calls, for every node, the converter
registered for its domain, op type and the model's opset version of that domain
(`compiler.frontend.registry`); converters live in `compiler.frontend.ops`, one module per
op family, and share the builder context (`compiler.frontend.context.BuildContext`).
Accepted forms (each family module names the opset versions it reads):
- QOperator: QLinearMatMul, MatMulInteger, pointwise QLinearConv (`ops.matmul`,
  `ops.conv`), com.microsoft QLinearSigmoid / QLinearLeakyRelu (`ops.elementwise`),
  standalone QuantizeLinear / DequantizeLinear (on the host, `ops.qdq`);
- QDQ (`ops.qdq`): DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear becomes one table;
  DequantizeLinear(x), DequantizeLinear(W) -> MatMul|Gemm -> QuantizeLinear becomes one
  host float MatMul (run by ONNX Runtime: its float32 summation order is not an integer op);
- com.microsoft QGemm with y_scale (a `matmul` with its int32 bias and QGemm's scale) and
  QLinearAdd / QLinearMul with one constant operand (`qlinear_binary`, exact MLAS);
- integer Clip, Reshape, Transpose, Identity; Cast to the same type and inference
  Dropout (no-ops: `identity`) (`ops.elementwise`, `ops.layout`);
- the project domain `ai.npufusion`: `Requantize` (`ops.project`).

Every attribute of an op the frontend interprets itself is either interpreted or
rejected (`INTERPRETED_ATTRIBUTES`, declared with each converter); ops run by ONNX Runtime
on the host (float ops, standalone QuantizeLinear/DequantizeLinear, QDQ MatMul groups) keep
their attributes, which ONNX Runtime interprets. Any other op, of any opset domain ONNX
Runtime knows (ai.onnx.ml, com.microsoft, ...), an opset version no converter claims, or a
form of a known op the NPU has no meaning for, is kept on the host as it is written
(`host_onnx` with a `placement` reason, reported as `unsupported_op`); the rest of the model
is still analysed. Malformed input (invalid model, bad attribute of an interpreted op,
unknown domain) raises `FrontendError` with a one-line message naming the node (and the
attribute or type).

Host values may have any type numpy holds (bool, int64, float16, strings, ...:
`compiler.ort.host.ONNX_OF`); subgraph nodes (If, Loop, Scan) take their bodies' outer-scope
reads as inputs (`.subgraphs`); shapes ORT's constant folding knows (Shape of a static tensor
and integer values computed from it) are read by their users' shape inference
(`BuildContext.known`); an Identity of a constant is that constant; opset imports no node uses
are ignored.

An initializer listed in graph.input of an IR>=4 model is overridable at run time
(`compiler.frontend.overridable`): a graph input, never a constant; an op that needs it
constant stays on the host with an `unsupported_op` placement naming it.

A symbolic batch dimension is fixed after showing rows independent (`compiler.frontend.batch`);
under an integer QDQ reading the model is first rewritten by ONNX Runtime's QDQ
transformers (`compiler.frontend.qdq_reading`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from compiler.errors import FrontendError
from compiler.ir.graph import Graph, Value
from compiler.ort.host import NAME_OF as HOST_TYPES
from compiler.phases import phase
from prover.reference import ONNX, ReferenceProfile

from . import converters  # noqa: F401 - registers every converter
from .batch import PROBE_SIZES, check_rows_independent, dynamic_inputs, with_batch
from .checked import CheckedModel, one_line, validate, validate_ort_graph
from .context import BuildContext
from .elem_types import DTYPES, EIGHT_BIT, MAX_ELEMENTS, ORT_QLINEAR_TYPES, QDQ_SCALE_TYPES
from .f16_context import PROJECT_DOMAIN, ort_graph
from .ops import unary_region
from .ops.constant import constant_value
from .ops.host import HOST_FLOAT_OPS
from .ops.qdq import qdq_activation, qdq_groups
from .overridable import overridable_message
from .qdq_reading import DefaultSessionRefusal, float_reading, integer_reading
from .registry import (
    KNOWN_DOMAINS,
    ML_DOMAIN,
    MS_DOMAIN,
    REGISTRY,
    canonical_domain,
    opset_version,
)

__all__ = [
    "DTYPES",
    "EIGHT_BIT",
    "HOST_FLOAT_OPS",
    "INTERPRETED_ATTRIBUTES",
    "KNOWN_DOMAINS",
    "MAX_ELEMENTS",
    "ML_DOMAIN",
    "MS_DOMAIN",
    "ORT_QLINEAR_TYPES",
    "PROJECT_DOMAIN",
    "QDQ_SCALE_TYPES",
    "load_model",
    "to_ir",
]

# The attributes each op the frontend lowers itself interprets (its converter reads and
# checks their values, `registry.converter(..., attributes=)`). Any other attribute is an
# error naming it: a silently ignored attribute would change the model's meaning.
INTERPRETED_ATTRIBUTES: dict[str, frozenset[str]] = REGISTRY.attributes


def load_model(model: str | Path | onnx.ModelProto | CheckedModel) -> onnx.ModelProto:
    """Load and validate (checker, strict shape inference) an ONNX model; a `CheckedModel`
    was validated already and is returned as it is."""
    if isinstance(model, CheckedModel):
        return model.proto
    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)
    else:
        try:
            m = onnx.load(str(model))
        except Exception as e:  # noqa: BLE001 - any load failure is bad input
            raise FrontendError(f"cannot load ONNX model {model}: {one_line(e)}") from None
    return validate(m).proto


class _Builder(BuildContext):
    """The dispatcher: walks the graph and calls each node's converter (`.registry`)."""

    def constant(self, n: onnx.NodeProto) -> np.ndarray:
        """The value of Constant node `n` (`.ops.constant`)."""
        return constant_value(self, n)

    # -- graph inputs --------------------------------------------------------------------

    def add_inputs(self) -> None:
        init = set(self.consts)
        for vi in self.m.graph.input:
            if vi.name in init:
                continue
            try:
                self.add_input(vi)
            except FrontendError as e:
                if vi.name not in self.overridable:
                    raise
                why = overridable_message(vi.name, self.m.ir_version)
                raise FrontendError(f"{e}; {why}") from None

    def add_input(self, vi: onnx.ValueInfoProto) -> None:
        """Graph input `vi` as an IR value (static shape, a supported element type)."""
        tt = vi.type.tensor_type
        users = self.onnx_users.get(vi.name, [])
        where = f" (consumed by {self.label(users[0])})" if users else ""
        if tt.elem_type not in HOST_TYPES:
            raise FrontendError(
                f"graph input '{vi.name}'{where}: element type "
                f"{TensorProto.DataType.Name(tt.elem_type)} has no numpy array to feed it "
                f"(ONNX Runtime's Python API cannot feed it either)"
            )
        dims = []
        for d in tt.shape.dim:
            if not d.HasField("dim_value") or d.dim_value <= 0:
                raise FrontendError(
                    f"graph input '{vi.name}'{where}: dynamic dimension "
                    f"'{d.dim_param or '?'}' is not supported; give the model static shapes"
                )
            dims.append(int(d.dim_value))
        if not tt.HasField("shape"):
            raise FrontendError(f"graph input '{vi.name}'{where}: shape unknown (dynamic rank)")
        if int(np.prod(dims, dtype=object)) > MAX_ELEMENTS:
            raise FrontendError(
                f"graph input '{vi.name}'{where}: shape {dims} has more than 2^31 elements"
            )
        self.values[vi.name] = Value(vi.name, HOST_TYPES[tt.elem_type], tuple(dims))
        self.names.add(vi.name)

    # -- conversion ----------------------------------------------------------------------

    def check_names(self) -> None:
        """Every node, value and graph name must be text (protobuf hands back bytes otherwise)."""
        g = self.m.graph
        for n in g.node:
            for name in [n.name, n.op_type, n.domain, *n.input, *n.output]:
                if not isinstance(name, str):
                    raise FrontendError(f"a node has a name that is not valid UTF-8: {name!r}")
        for vi in [*g.input, *g.output, *g.initializer]:
            if not isinstance(vi.name, str):
                raise FrontendError(
                    f"a graph value has a name that is not valid UTF-8: {vi.name!r}"
                )

    def run(self) -> Graph:
        self.check_names()
        self.add_inputs()
        self.fold_constant_casts()
        groups = qdq_groups(self)
        skip = {id(n) for _, ns in groups.values() for n in ns[:-1]}
        for n in self.m.graph.node:
            if id(n) in skip:
                continue
            key = n.name or n.output[0]
            if key in groups:
                kind, members = groups[key]
                if kind == "act":
                    try:
                        qdq_activation(self, members)
                    except FrontendError as e:
                        if not getattr(e, "overridable", False):
                            raise
                        # ORT runs the group with the value fed at run time
                        self.host(members, placement=f"{self.label(members[-1])} runs on the "
                                  f"host: {str(e).split(': ', 1)[-1]}")  # fmt: skip
                else:
                    self.host(members, compute=members[-2].op_type)
                continue
            self.convert(n)
        if self.deferred:
            held, pending = self.deferred[0]
            last = held[-1]
            name = sorted(pending)[0]
            raise self.fail(
                last,
                f"the shape of '{name}' follows the values (ONNX Runtime computes it at run "
                "time) and no later op makes it static; the tool needs static shapes",
            )
        outs = []
        for o in self.graph_outputs:
            if o not in self.values and o in self.consts:
                # a constant output (ORT's constant folding computed it): a host Constant
                value = onnx.numpy_helper.from_array(np.asarray(self.consts[o]))
                self.host([onnx.helper.make_node("Constant", [], [o], name=o, value=value)])
            if o not in self.values:
                raise FrontendError(f"graph output '{o}' is not computed by a supported node")
            outs.append(o)
        ins = [vi.name for vi in self.m.graph.input if vi.name not in self.consts]
        failed = unary_region.resolve(self)
        if failed:  # a region is no table after all: build again, running it on the host
            again = type(self)(self.m, self.reference, naming=self.naming)
            unary_region.state(again).failed = {**unary_region.state(self).failed, **failed}
            return again.run()
        g = Graph(self.values, self.nodes, ins, outs, dict(self.opsets))
        g.prune_values()
        return g

    def convert(self, n: onnx.NodeProto) -> None:
        """Call the converter registered for `n`'s domain, op and the model's opset version.

        Without one, `n` runs on the host (`unsupported_op`, naming the op and version); in
        the project domain, which ONNX Runtime cannot run, that is an error.
        """
        if self.join_deferred(n):
            return
        dom = canonical_domain(n.domain or "")
        version = opset_version(self.opsets, dom)
        conv = REGISTRY.lookup(dom, n.op_type, version)
        if conv is None:
            if dom == PROJECT_DOMAIN:
                if REGISTRY.known(dom, n.op_type):
                    raise self.fail(n, REGISTRY.unclaimed_reason(dom, n.op_type, version))
                raise self.fail(n, f"unsupported operator (domain '{dom}')")
            return self.unsupported(n, REGISTRY.unclaimed_reason(dom, n.op_type, version))
        if dom == PROJECT_DOMAIN:
            return conv.fn(self, n)
        try:
            conv.fn(self, n)
        except FrontendError as e:
            # a form the NPU has no meaning for (a 3x3 QLinearConv, dynamic weights, an
            # overridable initializer where a constant is needed, ...) is still a valid op
            # ONNX Runtime runs: it stays on the host; else the input is bad
            overridable = getattr(e, "overridable", False)
            run_time = getattr(e, "run_time_input", False)
            if not (conv.host_fallback or overridable or run_time):
                raise
            if getattr(e, "bad_input", False) or not self.ort_runs(n):
                raise
            try:
                self.unsupported(n, str(e).split(": ", 1)[-1])
            except FrontendError:
                if overridable:  # e.g. a Reshape to a run-time shape: name the cause
                    raise e from None
                raise


@lru_cache(maxsize=1)
def _ort_domains() -> frozenset[str]:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

        return frozenset(s.domain for s in ort_c.get_all_operator_schema())
    except Exception:  # noqa: BLE001 - no schema listing: no extra domain is known
        return frozenset()


def qdq_activation_types(m: onnx.ModelProto) -> dict[str, str]:
    """The activation element type `m` writes for each QDQ MatMul/Gemm/Conv (its name ->
    the type its input-0 DequantizeLinear reads, from that DequantizeLinear's zero point
    or the value's inferred type)."""
    g = m.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*g.input, *g.value_info]}
    types |= {t.name: t.data_type for t in g.initializer}
    made = {o: n for n in g.node for o in n.output}
    out = {}
    for n in g.node:
        if n.op_type not in ("MatMul", "Gemm", "Conv") or not n.input:
            continue
        dq = made.get(n.input[0])
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        t = types.get(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
        t = t or types.get(dq.input[0])
        if t in (TensorProto.INT8, TensorProto.UINT8):
            out[n.name or n.output[0]] = HOST_TYPES[t]
    return out


def used_domains(g: onnx.GraphProto) -> set[str]:
    """The opset domains the nodes of `g` and of its subgraphs use (an import nothing uses,
    such as the `ai.onnx.training` ORT's `quant_pre_process` writes, is ignored, as ONNX
    Runtime ignores it)."""
    out: set[str] = set()
    for n in g.node:
        out.add(n.domain or "")
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                out |= used_domains(sub)
    return out


def _ort_knows_domain(domain: str) -> bool:
    """Whether ONNX Runtime registers op schemas for an opset domain (then it can host them)."""
    return domain in _ort_domains()


def to_ir(
    model: str | Path | onnx.ModelProto | CheckedModel,
    *,
    reference: ReferenceProfile = ONNX,
    batch: int | None = None,
) -> tuple[Graph, onnx.ModelProto]:
    """`_to_ir`; ORT's rewritten graphs it read (`ort_graph`, whole models as bytes: 47 MB
    of resnet18's peak) are forgotten once the IR is built."""
    try:
        return _to_ir(model, reference=reference, batch=batch)
    finally:
        ort_graph.cache_clear()


def _to_ir(
    model: str | Path | onnx.ModelProto | CheckedModel,
    *,
    reference: ReferenceProfile = ONNX,
    batch: int | None = None,
) -> tuple[Graph, onnx.ModelProto]:
    """Load, validate and lower an ONNX model. Returns (IR graph, validated ModelProto).

    Activation tables are ONNX Runtime's as `reference` defines them (its `mlas_fma`).
    A symbolic leading (batch) dimension of graph inputs is fixed to `batch` (default 1)
    in both returned forms; `Graph.dynamic_batch` names those inputs (see
    `compiler.frontend.batch`). Ops of any domain the frontend does not lower run on the host.
    Under a reference whose `qdq_reading` is integer, QDQ groups are read as the integer
    kernels ONNX Runtime's default level runs (`compiler.frontend.qdq_reading`); the returned model
    is then that rewritten graph (what the reference runs). The user's own model is then read
    too (`_read_as_written`), before ORT's graph when it has float16 values (a float16 QDQ
    group ORT computes differently at levels default and off is refused there) and else only
    when reading ORT's graph fails, so that the error names the user's own nodes (that
    build's IR is discarded, so its unary regions take ORT's tables without the position
    check: `BuildContext.naming`).
    """
    with phase("load"):
        m = load_model(model)
    user = m
    used = used_domains(m.graph)
    for o in m.opset_import:
        if o.domain in used and o.domain not in KNOWN_DOMAINS and not _ort_knows_domain(o.domain):
            raise FrontendError(
                f"opset domain '{o.domain}' is not supported (ONNX Runtime cannot run it)"
            )
    integer = str(getattr(reference, "qdq_reading", "float")) == "integer"
    with phase("qdq_reading"):
        try:
            r = (integer_reading if integer else float_reading)(m)
        except DefaultSessionRefusal as refusal:  # the model's own errors are named first
            _read_as_written(m, reference)
            raise FrontendError(str(refusal)) from None
    if r is m:
        return _built(m, user, reference, batch)
    if _has_float16(m):
        _read_as_written(m, reference)
    try:
        return _built(validate_ort_graph(r).proto, user, reference, batch)
    except FrontendError:
        _read_as_written(m, reference)  # its own error first, naming the user's nodes
        raise


def _read_as_written(m: onnx.ModelProto, reference: ReferenceProfile) -> None:
    """Read the user's own model `m` where ORT's rewrite of it is what the IR is built
    from: its errors (`FrontendError`) name its own nodes; its IR is discarded."""
    dyn = dynamic_inputs(m)
    _Builder(with_batch(m, dyn, 1) if dyn else m, reference, naming=True).run()


def _has_float16(m: onnx.ModelProto) -> bool:
    """Whether the (shape-inferred) model has a float16 value, initializer or constant."""
    f16 = TensorProto.FLOAT16
    g = m.graph
    if any(vi.type.tensor_type.elem_type == f16 for vi in [*g.input, *g.value_info, *g.output]):
        return True
    if any(i.data_type == f16 for i in g.initializer):
        return True
    return any(
        a.t.data_type == f16 or (a.name == "to" and a.i == f16) for n in g.node for a in n.attribute
    )


def _built(
    m: onnx.ModelProto, user: onnx.ModelProto, reference: ReferenceProfile, batch: int | None
) -> tuple[Graph, onnx.ModelProto]:
    """`_to_ir`'s IR of the model it reads, `m` (the user's own model `user`, or ORT's
    rewrite of it): built at `batch` once its rows are shown independent."""
    dynamic = dynamic_inputs(m)
    built: dict[int, Graph] = {}  # batch size -> the IR built at it (each built once)
    if dynamic:
        if batch is not None and int(batch) < 1:
            raise FrontendError(f"batch size {batch} must be at least 1")
        for b in PROBE_SIZES:
            built[b] = _Builder(with_batch(m, dynamic, b), reference).run()
        shapes = {b: {k: v.shape for k, v in built[b].values.items()} for b in PROBE_SIZES}
        check_rows_independent(m, dynamic, shapes)
        size = 1 if batch is None else int(batch)
        m = with_batch(m, dynamic, size)
        g = built[size] if size in built else _Builder(m, reference).run()
    else:
        g = _Builder(m, reference).run()
    g.dynamic_batch = dynamic
    g.qdq_activation_types = qdq_activation_types(user)
    return g, m
