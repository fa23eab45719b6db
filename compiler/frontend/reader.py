"""ONNX frontend: load, validate, and lower a quantized ONNX model to the integer IR.

Accepted forms:
- QOperator: QLinearMatMul, MatMulInteger, QuantizeLinear, DequantizeLinear,
  com.microsoft QLinearSigmoid / QLinearLeakyRelu;
- QDQ: DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear becomes one table;
  DequantizeLinear(x), DequantizeLinear(W) -> MatMul|Gemm -> QuantizeLinear becomes one
  host float MatMul (run by ONNX Runtime: its float32 summation order is not an integer op);
- com.microsoft QGemm with y_scale (a `matmul` with its int32 bias and QGemm's scale) and
  QLinearAdd / QLinearMul with one constant operand (`qlinear_binary`, exact MLAS);
- integer Clip, Reshape, Transpose, Identity; Cast to the same type and inference
  Dropout (no-ops: `identity`);
- the project domain `ai.npufusion`: `Requantize(x)` with attributes `multiplier`,
  `shift`, `zero_point`, `rounding` ("double" | "single" | "float", the last with `scale`)
  and `output_type` ("int8", "uint8", "int16", ...).

Every attribute of an op the frontend interprets itself is either interpreted or
rejected (`INTERPRETED_ATTRIBUTES`); ops run by ONNX Runtime on the host (float ops,
standalone QuantizeLinear/DequantizeLinear, QDQ MatMul groups) keep their attributes,
which ONNX Runtime interprets. Any other op, of any opset domain ONNX Runtime knows
(ai.onnx.ml, com.microsoft, ...), or a form of a known op the NPU has no meaning for, is
kept on the host as it is written (`host_onnx` with a `placement` reason, reported as
`unsupported_op`); the rest of the model is still analysed. Malformed input (invalid
model, bad attribute of an interpreted op, unknown domain) raises `FrontendError` with
a one-line message naming the node (and the attribute or type).

An initializer listed in graph.input of an IR>=4 model is overridable at run time
(`compiler.frontend.overridable`): a graph input, never a constant; an op that needs it
constant stays on the host with an `unsupported_op` placement naming it.

A symbolic batch dimension is fixed after showing rows independent (`compiler.frontend.batch`);
under an integer QDQ reading the model is first rewritten by ONNX Runtime's QDQ
transformers (`compiler.frontend.qdq_reading`).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from compiler.errors import FrontendError
from compiler.ir.graph import Graph, Value
from compiler.ort.tables import (
    QDQ_FUNCTIONS,
    QLINEAR_FUNCTIONS,
    TableSpec,
    reference_table,
)
from prover.domain import KernelError
from prover.inttypes import TYPES, int_type
from prover.qlinear_binary import QLinearBinaryParams, span_mode
from prover.reference import ONNX, ReferenceProfile
from prover.requant import check_multiplier

from . import ops  # noqa: F401 - registers the converters
from .batch import PROBE_SIZES, check_rows_independent, dynamic_inputs, with_batch
from .checked import CheckedModel, one_line, validate
from .context import BuildContext
from .elem_types import (
    DTYPES,
    EIGHT_BIT,
    MAX_ELEMENTS,
    ORT_QLINEAR_TYPES,  # noqa: F401 - re-exported
    QDQ_SCALE_TYPES,
)
from .elem_types import type_name as _type_name
from .f16_context import PROJECT_DOMAIN, decorated_groups, ort_dequantize_types
from .ops.constant import constant_value
from .overridable import overridable_message
from .qdq_reading import integer_reading
from .registry import (
    KNOWN_DOMAINS,
    ML_DOMAIN,  # noqa: F401 - re-exported
    MS_DOMAIN,
    REGISTRY,
    canonical_domain,
    converter,
    opset_version,
)

HOST_FLOAT_OPS = ("MatMul", "Gemm", "Sigmoid", "Tanh", "Relu", "Add", "Sub", "Mul")


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
        if tt.elem_type not in DTYPES:
            raise FrontendError(
                f"graph input '{vi.name}'{where}: unsupported element type "
                f"{TensorProto.DataType.Name(tt.elem_type)}"
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
        self.values[vi.name] = Value(vi.name, DTYPES[tt.elem_type], tuple(dims))
        self.names.add(vi.name)

    # -- QDQ grouping --------------------------------------------------------------------

    def qdq_groups(self) -> dict[str, tuple[str, list[onnx.NodeProto]]]:
        """Map the name of each group's final QuantizeLinear to (kind, nodes of the group)."""
        version = opset_version(self.opsets, "")
        if not all(
            REGISTRY.lookup("", op, version) for op in ("QuantizeLinear", "DequantizeLinear")
        ):
            return {}  # Q/DQ of an opset no converter has read: each node is converted alone
        prod = self.producer_map()
        groups: dict[str, tuple[str, list[onnx.NodeProto]]] = {}
        # float16 groups as ORT runs them, with its float32 casts (the integer QDQ reading)
        for out, (members, dq_type) in decorated_groups(self.m.graph, self.single_use).items():
            q = members[-1]
            groups[q.name or q.output[0]] = ("act", members)
            self.f16_dq_types[out] = dq_type
        for q in self.m.graph.node:
            if q.output and q.output[0] in self.f16_dq_types:
                continue
            if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx"):
                continue
            mid = prod.get(q.input[0])
            if mid is None or not self.single_use(q.input[0]):
                continue
            if mid.op_type in QDQ_FUNCTIONS and mid.domain in ("", "ai.onnx"):
                dq = prod.get(mid.input[0])
                if (
                    dq is not None
                    and dq.op_type == "DequantizeLinear"
                    and dq.input[0] not in self.consts
                ):
                    if self.single_use(mid.input[0]):
                        groups[q.name or q.output[0]] = ("act", [dq, mid, q])
            elif mid.op_type in ("MatMul", "Gemm") and mid.domain in ("", "ai.onnx"):
                members = [mid, q]
                ok = True
                for i in mid.input:
                    p = prod.get(i)
                    if p is not None and p.op_type == "DequantizeLinear" and self.single_use(i):
                        members.insert(0, p)
                    elif i not in self.consts:
                        ok = False
                if ok and any(p.op_type == "DequantizeLinear" for p in members):
                    pos = {id(n): i for i, n in enumerate(self.m.graph.node)}
                    members.sort(key=lambda n: pos[id(n)])
                    groups[q.name or q.output[0]] = ("matmul", members)
        return groups

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
        groups = self.qdq_groups()
        skip = {id(n) for _, ns in groups.values() for n in ns[:-1]}
        for n in self.m.graph.node:
            if id(n) in skip:
                continue
            key = n.name or n.output[0]
            if key in groups:
                kind, members = groups[key]
                if kind == "act":
                    try:
                        self.qdq_activation(members)
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
        outs = []
        for o in self.graph_outputs:
            if o not in self.values:
                raise FrontendError(f"graph output '{o}' is not computed by a supported node")
            outs.append(o)
        ins = [vi.name for vi in self.m.graph.input if vi.name not in self.consts]
        g = Graph(self.values, self.nodes, ins, outs, dict(self.opsets))
        g.prune_values()
        return g

    def convert(self, n: onnx.NodeProto) -> None:
        """Call the converter registered for `n`'s domain, op and the model's opset version.

        Without one, `n` runs on the host (`unsupported_op`, naming the op and version); in
        the project domain, which ONNX Runtime cannot run, that is an error.
        """
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
            if not (conv.host_fallback or overridable):
                raise
            if getattr(e, "bad_input", False) or not self.ort_runs(n):
                raise
            try:
                self.unsupported(n, str(e).split(": ", 1)[-1])
            except FrontendError:
                if overridable:  # e.g. a Reshape to a run-time shape: name the cause
                    raise e from None
                raise

    def qlinear_binary(self, n: onnx.NodeProto) -> None:
        """com.microsoft QLinearAdd/QLinearMul with one constant operand: `qlinear_binary`.

        Other forms (two dynamic operands, a constant that is not one value per output
        column, a span mode that depends on the batch size) stay on the host; a zero, negative
        or non-finite scale is bad input.
        """
        self.positive_scales(n, {1: "A_scale", 4: "B_scale", 6: "C_scale"})
        try:
            self._qlinear_binary(n)
        except FrontendError as e:
            self.unsupported(n, str(e).split(": ", 1)[-1])

    def _qlinear_binary(self, n: onnx.NodeProto) -> None:
        self.attrs(n)
        if len(n.input) < 8:
            raise self.fail(n, "needs 8 inputs")
        a_name, b_name = n.input[0], n.input[3]
        a_const, b_const = a_name in self.consts, b_name in self.consts
        if a_const == b_const:
            raise self.fail(n, "only a form with exactly one constant operand has an NPU form")
        x_is_a = not a_const
        x = self.value(n, a_name if x_is_a else b_name)
        it = self.expect_dtype(n, x.name, EIGHT_BIT)
        c = self.consts[b_name if x_is_a else a_name]
        if c.dtype.name != it:
            raise self.fail(n, f"constant operand has type {c.dtype.name}; the input is {it}")
        scales = {}
        for idx, what in ((1, "A_scale"), (4, "B_scale"), (6, "C_scale")):
            self.float32_scales(n, {idx: what})
            scales[what] = float(self.scalar(n, idx, what))
        zps = {}
        for idx, what in ((2, "A_zero_point"), (5, "B_zero_point"), (7, "C_zero_point")):
            z = self.const(n, idx, what, optional=True)
            if z is not None and z.dtype.name != it:
                raise self.fail(n, f"{what} has type {z.dtype.name}; the input is {it}")
            zps[what] = int(self.scalar(n, idx, what, default=0))
        a_shape = x.shape if x_is_a else tuple(c.shape)
        b_shape = tuple(c.shape) if x_is_a else x.shape
        try:
            out_shape = tuple(np.broadcast_shapes(a_shape, b_shape))
        except ValueError:
            raise self.fail(
                n, f"shapes {list(a_shape)} and {list(b_shape)} do not broadcast"
            ) from None
        N = out_shape[-1] if out_shape else 1
        if (
            out_shape != x.shape
            or any(d != 1 for d in c.shape[:-1])
            or (c.ndim and c.shape[-1] not in (1, N))
        ):
            raise self.fail(
                n, f"constant operand of shape {list(c.shape)} is not one value per column"
            )
        const = tuple(int(v) for v in np.broadcast_to(c.reshape(-1), (N,)))
        mode = span_mode(a_shape, b_shape)
        if x.shape and n.op_type == "QLinearAdd":
            modes = set()
            for rows in (1, 2):
                xs = (rows,) + tuple(x.shape[1:])
                modes.add(
                    span_mode(xs, tuple(c.shape)) if x_is_a else span_mode(tuple(c.shape), xs)
                )
            if len(modes) > 1:
                raise self.fail(n, "ONNX Runtime's operand roles depend on the batch size here")
        try:
            params = QLinearBinaryParams(
                a_scale=scales["A_scale"], a_zp=zps["A_zero_point"],
                b_scale=scales["B_scale"], b_zp=zps["B_zero_point"],
                c_scale=scales["C_scale"], c_zp=zps["C_zero_point"], dtype=it,
            )  # fmt: skip
        except KernelError as e:
            raise self.fail(n, str(e)) from None
        self.emit(
            "qlinear_binary",
            [n],
            [x.name],
            Value(n.output[0], it, x.shape),
            binary=n.op_type,
            const=const,
            x_is_a=x_is_a,
            mode=str(mode.value),
            params=dataclasses.asdict(params),
            fma=bool(self.reference.mlas_fma),
        )

    def qlinear_activation(self, n: onnx.NodeProto) -> None:
        attrs = self.attrs(n)
        it = self.expect_dtype(n, n.input[0], EIGHT_BIT)
        x = self.value(n, n.input[0])
        xs = float(self.scale(n, 1, "X_scale")[0])
        xz = int(self.scalar(n, 2, "X_zero_point", default=0))
        ys = float(self.scale(n, 3, "Y_scale")[0])
        yz = int(self.scalar(n, 4, "Y_zero_point", default=0))
        for idx, what in ((2, "X_zero_point"), (4, "Y_zero_point")):
            z = self.const(n, idx, what, optional=True)
            if z is not None and z.dtype.name != it:
                raise self.fail(n, f"{what} has type {z.dtype.name}; the input is {it}")
        alpha = attrs.get("alpha")
        if n.op_type == "QLinearLeakyRelu" and alpha is None:
            alpha = 0.01
        ot = it  # com.microsoft QLinear activations keep the input type
        self.lut(n, [n], x, QLINEAR_FUNCTIONS[n.op_type], "qlinear", xs, xz, it, ys, yz, ot, alpha)

    def qdq_activation(self, members: list[onnx.NodeProto]) -> None:
        """DequantizeLinear -> Sigmoid|Tanh|Relu -> QuantizeLinear as one table.

        Interprets opsets 13 to 23+: `axis` (per-tensor scales only: a per-axis scale is
        rejected), `block_size` (0 only), `output_dtype` (QuantizeLinear: the output type
        when there is no zero point; DequantizeLinear-23: must be the scale type),
        `saturate` (float8 only, and float8 is rejected) and `precision` (the scale type).
        """
        dq, q = members[0], members[-1]
        act = next(m for m in members if m.op_type in QDQ_FUNCTIONS)
        da, qa = self.attrs(dq), self.attrs(q)
        self.attrs(act)
        for node, a in ((dq, da), (q, qa)):
            if int(a.get("block_size", 0)) != 0:
                raise self.fail(
                    node, "attribute 'block_size' (blocked quantization) is not supported"
                )
        it = self.expect_dtype(dq, dq.input[0], EIGHT_BIT)
        x = self.value(dq, dq.input[0])
        xs, xs_t = self.scale(dq, 1, "x_scale", tuple(QDQ_SCALE_TYPES.values()))
        ys, ys_t = self.scale(q, 1, "y_scale", tuple(QDQ_SCALE_TYPES.values()))
        dq_type = self.f16_dq_types.get(q.output[0])
        if dq_type is None and xs_t != ys_t:
            raise self.fail(q, f"y_scale has type {ys_t}, x_scale {xs_t}; mixed types unsupported")
        for node, attr, t in ((dq, "output_dtype", xs_t), (q, "precision", ys_t)):
            a = (da if node is dq else qa).get(attr, 0)
            scale_tp = {v: k for k, v in QDQ_SCALE_TYPES.items()}[t]
            if int(a) not in (0, scale_tp):
                raise self.fail(
                    node,
                    f"attribute '{attr}' = {_type_name(a)} differs from the scale type "
                    f"{t}; not supported",
                )
        xz = int(self.scalar(dq, 2, "x_zero_point", default=0))
        yz_arr = self.const(q, 2, "y_zero_point", optional=True)
        out_dtype = int(qa.get("output_dtype", 0))
        if yz_arr is not None:
            ot = yz_arr.dtype.name
            yz = int(yz_arr.reshape(()).item()) if yz_arr.size == 1 else None
            if yz is None:
                raise self.fail(q, "y_zero_point must be a scalar (per-tensor)")
        else:
            ot = DTYPES.get(out_dtype, _type_name(out_dtype)) if out_dtype else "uint8"
            yz = 0
        if ot not in EIGHT_BIT:
            why = "y_zero_point" if yz_arr is not None else "attribute 'output_dtype'"
            raise self.fail(q, f"output type {ot} ({why}) not supported; supported: int8, uint8")
        if out_dtype and DTYPES.get(out_dtype) != ot:
            raise self.fail(
                q, f"attribute 'output_dtype' = {_type_name(out_dtype)} but y_zero_point is {ot}"
            )
        # QuantizeLinear-23 divides in `precision`, by default the scale's type.
        q_version = self.opsets.get("", self.opsets.get("ai.onnx", 0))
        precision = ys_t if q_version >= 23 else "float32"
        if ys_t == "float16":
            # written with casts or not, the group means what ORT runs (it may move casts)
            ort_type = self.ort_dq_type(q)
            if dq_type not in (None, ort_type):
                raise self.fail(
                    q,
                    f"ONNX Runtime runs this float16 QDQ group's DequantizeLinear in {ort_type}, "
                    f"not the {dq_type} its casts say; not supported",
                )
            dq_type = ort_type
        self.lut(
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

    def ort_dq_type(self, q: onnx.NodeProto) -> str:
        """The DequantizeLinear output type ORT gives a float16 group in this model
        (`compiler.frontend.f16_context`), else an error naming `q`.

        The float QDQ reading names ORT's level off. The integer reading names its default
        level, but counterexamples are replayed at level off: the two must agree.
        """
        if self._ort_dq_types is None:
            integer = str(getattr(self.reference, "qdq_reading", "float")) == "integer"
            levels = ("default", "off") if integer else ("off",)
            self._ort_dq_types = [ort_dequantize_types(self.m, lv) for lv in levels]
        found = []
        for types in self._ort_dq_types:
            t = types.get(q.output[0])
            if t is None and q.name:
                t = types.get(f"node:{q.name}")
            found.append(t)
        if None in found:
            raise self.fail(
                q,
                "ONNX Runtime casts this float16 QDQ group to float32 in a way the tool does "
                "not model (compiler.frontend.f16_context); not supported",
            )
        if len(set(found)) > 1:
            raise self.fail(
                q,
                "ONNX Runtime computes this float16 QDQ group differently at optimisation "
                "levels default and off (it rounds the dequantized value to float16 at one "
                "only); not supported",
            )
        return found[0]

    def lut(
        self,
        n,
        origin,
        x,
        function,
        form,
        xs,
        xz,
        it,
        ys,
        yz,
        ot,
        alpha,
        op_type=None,
        scale_type: str = "float32",
        quantize_precision: str = "float32",
        dequantize_type: str | None = None,
    ) -> None:
        if not (xs > 0 and ys > 0 and np.isfinite(xs) and np.isfinite(ys)):
            raise self.bad(n, "scales must be finite and positive")
        try:
            spec = TableSpec(form, op_type or n.op_type, xs, xz, it, ys, yz, ot, alpha, scale_type)
            table = reference_table(
                spec,
                fma=self.reference.mlas_fma,
                quantize_precision=quantize_precision,
                dequantize_type=dequantize_type,
            )
        except KernelError as e:
            raise self.fail(n, str(e)) from None
        out = Value(n.output[0], ot, x.shape)
        self.emit(
            "lut",
            origin,
            [x.name],
            out,
            table=table,
            in_type=it,
            out_type=ot,
            function=function,
            in_scale=xs,
            in_zp=xz,
            out_scale=ys,
            out_zp=yz,
            source=form,
        )

    def requantize(self, n: onnx.NodeProto) -> None:
        attrs = self.attrs(n)
        x = self.value(n, n.input[0])
        if x.dtype not in TYPES or x.dtype == "int64":
            raise self.fail(n, f"input has type {x.dtype}; Requantize takes int8/uint8/int16/int32")
        out_t = attrs.get("output_type", b"int8")
        out_t = out_t.decode() if isinstance(out_t, bytes) else str(out_t)
        rounding = attrs.get("rounding", b"double")
        rounding = rounding.decode() if isinstance(rounding, bytes) else str(rounding)
        if out_t not in TYPES or int_type(out_t).bits > 16:
            raise self.fail(
                n, f"output_type {out_t!r} not supported; use int8, uint8, int16 or uint16"
            )
        zp = int(attrs.get("zero_point", 0))
        if not int_type(out_t).contains(zp):
            raise self.fail(n, f"zero_point {zp} outside {out_t}")
        if rounding in ("double", "single"):
            for req in ("multiplier", "shift"):
                if req not in attrs:
                    raise self.fail(n, f"missing attribute '{req}'")
            m, s = int(attrs["multiplier"]), int(attrs["shift"])
            try:
                check_multiplier(m, s, single_rounding=rounding == "single")
            except KernelError as e:
                raise self.fail(n, str(e)) from None
            params = {"scheme": rounding, "multiplier": m, "shift": s}
        elif rounding == "float":
            if "scale" not in attrs or not float(attrs["scale"]) > 0:
                raise self.fail(n, "rounding 'float' needs a positive attribute 'scale'")
            params = {"scheme": "float", "scale": float(np.float32(attrs["scale"]))}
        else:
            raise self.fail(n, f"rounding {rounding!r} unknown; use double, single or float")
        out = Value(n.output[0], out_t, x.shape)
        self.emit("requantize", [n], [x.name], out, zp=zp, out=out_t, **params)

    def clip(self, n: onnx.NodeProto) -> None:
        x = self.value(n, n.input[0])
        if x.dtype == "float32":
            return self.float_op(n)
        self.attrs(n)
        t = int_type(x.dtype)
        lo = self.scalar(n, 1, "min", default=t.min)
        hi = self.scalar(n, 2, "max", default=t.max)
        if int(lo) > int(hi):
            raise self.fail(n, f"min {lo} > max {hi}")
        self.emit(
            "clip", [n], [x.name], Value(n.output[0], x.dtype, x.shape), lo=int(lo), hi=int(hi)
        )

    def float_op(self, n: onnx.NodeProto) -> None:
        """A float op ONNX Runtime runs as written; on other types it has no NPU form either."""
        for i in n.input:
            if i and i not in self.consts and self.dtype_of(n, i) != "float32":
                t = self.dtype_of(n, i)
                return self.unsupported(n, f"{n.op_type} on {t} (input '{i}') has no NPU form")
        self.host([n])


def _method(name: str) -> Any:
    return lambda ctx, n: getattr(ctx, name)(n)


for _op, _name, _attrs, _fallback in (
    ("Clip", "clip", (), False),
):  # fmt: skip
    converter("", _op, since=10, attributes=_attrs, host_fallback=_fallback)(_method(_name))
converter("", "QuantizeLinear", since=10,
          attributes=("axis", "block_size", "output_dtype", "saturate", "precision"))(
    lambda ctx, n: ctx.host([n]))  # fmt: skip
converter("", "DequantizeLinear", since=10, attributes=("axis", "block_size", "output_dtype"))(
    lambda ctx, n: ctx.host([n])
)
for _op in HOST_FLOAT_OPS:
    converter("", _op, since=1, attributes=() if _op in QDQ_FUNCTIONS else None)(
        _method("float_op")
    )
for _op in QLINEAR_FUNCTIONS:
    converter(MS_DOMAIN, _op, since=1, attributes=("alpha",) if "Leaky" in _op else (),
              host_fallback=True)(_method("qlinear_activation"))  # fmt: skip
for _op in ("QLinearAdd", "QLinearMul"):
    converter(MS_DOMAIN, _op, since=1, attributes=())(_method("qlinear_binary"))
converter(PROJECT_DOMAIN, "Requantize", since=1,
          attributes=("multiplier", "shift", "zero_point", "rounding", "output_type", "scale"))(
    _method("requantize"))  # fmt: skip
INTERPRETED_ATTRIBUTES = REGISTRY.attributes


@lru_cache(maxsize=1)
def _ort_domains() -> frozenset[str]:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

        return frozenset(s.domain for s in ort_c.get_all_operator_schema())
    except Exception:  # noqa: BLE001 - no schema listing: no extra domain is known
        return frozenset()


def _ort_knows_domain(domain: str) -> bool:
    """Whether ONNX Runtime registers op schemas for an opset domain (then it can host them)."""
    return domain in _ort_domains()


def to_ir(
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
    is then that rewritten graph (what the reference runs). The user's own model is read
    first either way, so its errors name its own nodes.
    """
    m = load_model(model)
    for o in m.opset_import:
        if o.domain not in KNOWN_DOMAINS and not _ort_knows_domain(o.domain):
            raise FrontendError(
                f"opset domain '{o.domain}' is not supported (ONNX Runtime cannot run it)"
            )
    if str(getattr(reference, "qdq_reading", "float")) == "integer":
        r = integer_reading(m)
        if r is not m:
            dyn = dynamic_inputs(m)
            _Builder(with_batch(m, dyn, 1) if dyn else m, reference).run()
            m = load_model(r)
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
    return g, m
