"""Lowering to `npu_backend.lowered.LoweredModel`: a rewrite with obligations too.

Each op placed on the NPU carries an obligation that its NPU form equals the
ONNX semantics under the policy: a QLinearMatMul's float requantization against
the target's requantization (`lowering`, per column group over the accumulator
range), a table against the target toolchain's table (`table`, over every input
value), standalone requantize and clip (`lowering`). An op whose obligation is
not proven, or that the backend's step validation refuses, stays on the host
with a diagnostic: integer ops as `HostKernel` (the kernel's concrete
semantics), ONNX ops as `HostOnnx` subgraphs run by ONNX Runtime. Fused nodes were
proven by the gate and lower to a fused `NpuMatMul`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import cast

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper

from compiler.errors import CompilerError
from compiler.ir import npu_step
from compiler.ir.accumulator import acc_range
from compiler.ir.context import Context
from compiler.ir.epilogue import (
    SCHEME_OF,
    lut_spec_of,
    npu_function,
    requant_column_posts,
    requant_params,
    requant_posts,
)
from compiler.ir.graph import Graph, Node, Value
from compiler.ir.policy_scope import effective_policy
from compiler.ir.semantics import (
    node_term,
    pair_saturates,
    requant_groups,
    requant_term,
)
from compiler.ir.site import Diagnostic
from compiler.ort.host import host_model, submodel
from compiler.phases import phase
from compiler.proving import prove
from compiler.proving.divergence import lowering_block
from compiler.proving.eltwise_lowering import EltwiseLowering
from compiler.proving.families import lowering_family
from compiler.proving.moves import NPU_STEPS, LayoutLowering, one_node_step
from compiler.proving.prove import components
from npu_backend.buffers import memory_issues, storage_dtype
from npu_backend.lowered import (
    HostKernel,
    HostOnnx,
    LoweredModel,
    NpuClip,
    NpuLut,
    NpuMatMul,
    NpuMove,
    NpuRequant,
    TensorSpec,
    step_writes,
)
from npu_backend.postprocess import ColumnPosts, LutParams, Post, PostProcess
from npu_backend.target import requant_from_scale
from npu_backend.validate import validate_step, window_issues
from prover.domain import KernelError
from prover.errors import StoreMiss
from prover.inttypes import int_type
from prover.lut import LOADED_TABLE, build_lut, reorder_table
from prover.obligation import Obligation
from prover.terms import Term, Var, op
from prover.verdict import ReasonCode, Status

_kind = npu_step.compute_kind


def _nbytes(v: Value) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(storage_dtype(v.dtype)).itemsize


def _step_tensors(step) -> tuple[str, ...]:
    names = ("a", "b", "x", "w", "bias", "out")
    return tuple(getattr(step, k) for k in names if getattr(step, k, None) is not None)


# ONNX ops cleanup may bypass (plus Constant): a host fallback re-includes them.
_VALUE_PRESERVING = ("Identity", "Reshape", "Transpose", "Constant")


class Lowerer(EltwiseLowering, LayoutLowering):
    def __init__(self, g: Graph, ctx: Context) -> None:
        self.g, self.ctx, self.t = g, ctx, ctx.config.target
        self.steps: list = []
        self.consts: dict[str, np.ndarray] = {}
        # a layout transpose after an NPU op: its output -> (NPU output, perm, step)
        self.moves: dict[str, tuple[str, tuple[int, ...], HostOnnx | NpuMove]] = {}
        self.kept: set[str] = set()  # values some NPU op read in the NPU's layout instead
        self.shapes: dict[str, tuple[int, ...]] = {}

    def diag(self, n: Node, code: ReasonCode, message: str) -> None:
        self.ctx.state.diagnostics.append(Diagnostic(code, list(n.origin), message))

    def obligation(self, n: Node, kind: str, before, after, ranges) -> Obligation:
        """The obligation that `n`'s NPU form (`after`) equals its semantics (`before`)."""
        policy = effective_policy(self.g, n.output, self.ctx.config.policy)
        return Obligation(kind, before, after, ranges, policy, note=f"lower {n.name}")

    def prove(
        self, n: Node, kind: str, before, after, ranges
    ) -> tuple[bool, ReasonCode | None, str]:
        """(proven, code, message) of one lowering obligation."""
        return self.decided(self.obligation(n, kind, before, after, ranges))

    def decided(self, ob: Obligation) -> tuple[bool, ReasonCode | None, str]:
        """(proven, code, message) of `ob`, decided once per run."""
        kind, policy = ob.kind, ob.policy
        v = prove.check(ob, self.ctx)
        if isinstance(v, StoreMiss):  # the ro gate's miss: recording fixes it, not a budget
            return False, ReasonCode.PROOF_MISSING, str(v)
        if isinstance(v, Exception):
            return False, ReasonCode.UNKNOWN, f"prover error: {v}"
        if v.status == Status.PROVEN:
            return True, None, ""
        code = ReasonCode.REFUTED if v.status == Status.REFUTED else ReasonCode.UNKNOWN
        return (
            False,
            code,
            f"{kind} obligation {ob.hash[:12]} {v.status} under {policy}: {v.reason}",
        )

    def issues(self, step, values: tuple[Value, ...] = ()) -> list:
        """The backend's objections to `step`: validation, then buffers that cannot fit.

        Tensor sizes come from the IR values (`values` adds ones not in the graph).
        """
        sizes = {v.name: _nbytes(v) for v in values}
        shapes = {v.name: tuple(v.shape) for v in values}
        for name in _step_tensors(step):
            if name not in sizes and name in self.g.values:
                sizes[name] = _nbytes(self.g.values[name])
                shapes[name] = tuple(self.g.values[name].shape)
        return validate_step(step, self.t) + memory_issues(step, sizes, self.t, shapes)

    def npu_or_host(self, n: Node, step, ok: bool, code: ReasonCode | None, msg: str, host) -> None:
        if ok:
            issues = self.issues(step)
            if not issues:
                self.steps.append(step)
                return
            code, msg = ReasonCode(issues[0].code), issues[0].message
        assert code is not None  # not ok: the caller names why
        self.diag(n, code, f"{', '.join(n.origin)} stays on the host: {msg}")
        self.steps.extend(host() if callable(host) else [host])

    # -- per op ------------------------------------------------------------------------

    def matmul(self, n: Node) -> None:
        a = n.attrs
        caps = self.t.compute(_kind(n))
        if n.op == "fused":
            self.place_matmul(n, a["post"], a["structure"])
            return
        blocked = lowering_block(n, self.ctx.config.reference)
        if blocked is not None:
            self.place_matmul(n, None, "plain", False, ReasonCode.REFERENCE_DIVERGENCE, blocked)
            return
        rq = a["requant"]
        if caps is None:
            self.place_matmul(
                n, None, "plain", False, ReasonCode.UNSUPPORTED_FUNCTION, f"no {_kind(n)} unit"
            )
            return
        if a.get("window") is not None:  # a window the unit lacks: before any obligation
            wi = window_issues(npu_step.place_matmul(self.g, n, None, "plain").step, self.t)
            if wi:
                self.place_matmul(n, None, "plain", False, ReasonCode(wi[0].code), wi[0].message)
                return
        if rq is None:
            self.place_matmul(n, None, "plain")
            return
        N = a["w"].shape[1]
        r = acc_range(n)
        ok, code, msg = True, None, ""
        obligations: list[tuple[Term, Term, int, int]] = []
        groups = requant_groups(rq, N)
        posts: ColumnPosts | list[PostProcess | None] | None = (
            requant_column_posts(rq, N, caps.requant_scheme) if len(groups) > 1 else None
        )
        if posts is None:
            try:
                posts = requant_posts(rq, groups, N, caps.requant_scheme)
            except KernelError as e:
                # The target's requantizer cannot represent this scale: the op is not
                # NPU-runnable, so it stays on the host; the rest of the model goes on.
                why = (
                    f"the {caps.requant_scheme} requantizer of '{self.t.name}' cannot take it: {e}"
                )
                self.place_matmul(n, None, "plain", False, ReasonCode.UNSUPPORTED_OP, why)
                return
        policy = effective_policy(self.g, n.output, self.ctx.config.policy)
        # the columns the target requantizes as the model does (per-tensor ones too: every
        # column one member), proven together without building their obligations
        proven = None
        fam = lowering_family(n, rq, posts, r, policy)
        if fam is not None:
            with phase("prove"):
                proven = prove.identities(fam, self.ctx)
        for cols in groups:
            if proven is not None and all(proven[j] for j in cols):
                continue
            post_j = posts.post(cols[0]) if isinstance(posts, ColumnPosts) else posts[cols[0]]
            assert post_j is not None
            before = requant_term(Var("acc"), rq, cols[0])
            after = post_j.epilogue_term(Var("acc"))
            obligations += [(before, after, lo, hi) for _, lo, hi in components(cols, r.lo, r.hi)]
        # Decided in order up to the first not proven, as one batch: a per-channel op's
        # columns have their float thresholds computed together (`prove.prefetch`).
        built = [
            self.obligation(n, "lowering", b, a, {"acc": (lo, hi)}) for b, a, lo, hi in obligations
        ]
        with phase("prove"):
            prove.prefetch(built, self.ctx)
            for ob in built:
                ok, code, msg = self.decided(ob)
                if not ok:
                    break
        post: Post | None
        if isinstance(posts, ColumnPosts):
            post = posts
        else:
            post = posts[0] if len(set(posts)) == 1 else tuple(cast(list[PostProcess], posts))
        self.place_matmul(n, post, "plain", ok, code, msg)

    def matmul_act(self, n: Node) -> None:
        """QLinearMatMul of two activations: an NpuMatMul reading its second operand from
        dram at run time, with the requantization proven over the exact accumulator range
        (`lowering`); else the QLinearMatMul on the host."""
        a, rq = n.attrs, n.attrs["requant"]
        caps = self.t.compute("MatMul")
        if pair_saturates(n, self.ctx.config.reference):
            return self.act_on_host(
                n,
                ReasonCode.REFERENCE_DIVERGENCE,
                f"under reference {self.ctx.config.reference.name} uint8 x int8 pairs of two "
                "activations can saturate int16 (every int8 value is reachable), where the NPU "
                "accumulates exactly",
            )
        if caps is None:
            return self.act_on_host(n, ReasonCode.UNSUPPORTED_FUNCTION, "no MatMul unit")
        try:
            p = PostProcess(
                requant_from_scale(rq["scale"], rq["zp"], rq["out"], caps.requant_scheme)
            )
        except KernelError as e:
            why = f"the {caps.requant_scheme} requantizer of '{self.t.name}' cannot take it: {e}"
            return self.act_on_host(n, ReasonCode.UNSUPPORTED_OP, why)
        lo, hi = acc_range(n).overall
        before, after = requant_term(Var("acc"), rq, 0), p.epilogue_term(Var("acc"))
        ok, code, msg = self.prove(n, "lowering", before, after, {"acc": (lo, hi)})
        step = NpuMatMul(
            name=n.name, a=n.inputs[0], w=n.inputs[1], out=n.output, a_zp=int(a["a_zp"]),
            w_zp=int(a["w_zp"]), bias=None, a_type=a["a_type"], w_type=a["w_type"], post=p,
            onnx_nodes=tuple(n.origin), w_input=True,
        )  # fmt: skip
        self.npu_or_host(n, step, ok, code, msg, lambda: self.host_origin(n))

    def act_on_host(self, n: Node, code: ReasonCode, msg: str) -> None:
        self.diag(n, code, f"{', '.join(n.origin)} stays on the host: {msg}")
        self.steps.extend(self.host_origin(n))

    def place_matmul(
        self, n: Node, post, structure: str, ok=True, code: ReasonCode | None = None, msg=""
    ) -> None:
        """An NpuMatMul (with host layout steps around it where needed), else the host fallback.

        The NPU reads the reduced axis last and writes [..., N]: a pointwise conv (NCHW) gets
        host transposes around it; leading unit dims (a proven index map) a host reshape.
        """
        pl = npu_step.place_matmul(self.g, n, post, structure)
        step, x, nat_in, y, out, cf = pl.step, pl.x, pl.nat_in, pl.y, pl.out, pl.channels_first
        nat_shape = out.shape
        if ok:
            issues = self.issues(step, pl.buffers())
            if issues:
                ok, code, msg = False, ReasonCode(issues[0].code), issues[0].message
        if not ok:
            assert code is not None  # not ok: the caller names why
            self.diag(n, code, f"{', '.join(n.origin)} stays on the host: {msg}")
            self.steps.extend(self.host_origin(n))
            return
        self.consts[step.w] = npu_step.weights_array(n)
        if step.bias is not None:
            self.consts[step.bias] = np.asarray(n.attrs["bias"], dtype=np.int32)
        r = len(nat_shape) - 2  # spatial axes (2: NCHW; 1: a 1-D conv's NCW)
        if cf:
            ri = len(x.shape) - 2  # the input's own (the output may be read reshaped)
            to_last = (0, *range(2, ri + 2), 1)
            kept = self.kept_layout(n, x, nat_in, to_last)
            if kept is not None:  # the NPU already holds x channels-last: read it there
                step = dataclasses.replace(step, a=kept)
            elif not self.emitted(nat_in.name):  # else an earlier reader's transpose
                self.steps.append(self.transpose_step(n, x, nat_in, to_last))
        self.steps.append(step)
        self.shapes[step.out] = tuple(out.shape)
        if out is not y:
            if cf:
                own = Value(
                    f"{y.name}.nchw",
                    y.dtype,
                    (nat_shape[0], nat_shape[-1], *nat_shape[1:-1]),
                )
                own = y if own.shape == y.shape else own
                to_first = (0, r + 1, *range(1, r + 1))
                t = self.transpose_step(n, out, own, to_first)
                self.moves[own.name] = (out.name, to_first, t)
                self.steps.append(t)
                out = own
            if out is not y:
                self.steps.append(self.reshape_step(n, out, y))

    def lut(self, n: Node) -> None:
        a = n.attrs
        if a.get("table") is None:
            raise CompilerError(
                f"node '{n.name}' (lut): table missing; the op has no meaning to lower"
            )
        it = int_type(a["in_type"])
        x = Var(n.inputs[0])
        host = HostKernel(n.name, (n.inputs[0],), n.output, node_term(n, x), a["out_type"])
        function = npu_function(n, self.t.standalone.functions)
        if function not in self.t.standalone.functions:
            self.diag(
                n,
                ReasonCode.UNSUPPORTED_FUNCTION,
                f"{', '.join(n.origin)} stays on the host: the standalone unit "
                f"of '{self.t.name}' has no '{a['function']}'",
            )
            self.steps.append(host)
            return
        if function == LOADED_TABLE:  # the target loads the node's own table
            order = self.t.lut_builder.index_order
            logical = np.asarray(a["table"], dtype=np.int64)
            loaded = reorder_table(logical, it, "offset", order)
            lp = LutParams(tuple(int(v) for v in loaded), a["in_type"], a["out_type"], order)
        else:
            spec = lut_spec_of(n, self.t)
            lp = LutParams(
                tuple(int(v) for v in build_lut(spec)),
                a["in_type"],
                a["out_type"],
                spec.index_order,
                spec,
            )
        ok, code, msg = self.prove(
            n, "table", node_term(n, Var("x")), lp.term(Var("x")), {"x": (it.min, it.max)}
        )
        step = NpuLut.from_params(n.name, n.inputs[0], n.output, lp, function, n.origin)
        if ok and not self.issues(step) and self.in_npu_layout(n, step):
            return
        self.npu_or_host(n, step, ok, code, msg, host)

    def requantize(self, n: Node) -> None:
        a = n.attrs
        it = int_type(self.g.values[n.inputs[0]].dtype)
        host = HostKernel(
            n.name, (n.inputs[0],), n.output, node_term(n, Var(n.inputs[0])), a["out"]
        )
        scheme = self.t.standalone.requant_scheme
        if SCHEME_OF[a["scheme"]] != scheme:
            self.diag(
                n,
                ReasonCode.INTERVENING_REQUANTIZE,
                f"{', '.join(n.origin)} stays on the host: rounding "
                f"'{a['scheme']}' is not the standalone unit's '{scheme}'",
            )
            self.steps.append(host)
            return
        rq = requant_params(n)
        ok, code, msg = self.prove(
            n, "lowering", node_term(n, Var("x")), rq.term(Var("x")), {"x": (it.min, it.max)}
        )
        self.npu_or_host(
            n, NpuRequant(n.name, n.inputs[0], n.output, rq, n.origin), ok, code, msg, host
        )

    def clip(self, n: Node) -> None:
        a = n.attrs
        dt = self.g.values[n.output].dtype
        it = int_type(dt)
        host = HostKernel(n.name, (n.inputs[0],), n.output, node_term(n, Var(n.inputs[0])), dt)
        ok, code, msg = self.prove(
            n,
            "lowering",
            node_term(n, Var("x")),
            op("clip", Var("x"), lo=a["lo"], hi=a["hi"]),
            {"x": (it.min, it.max)},
        )
        self.npu_or_host(
            n,
            NpuClip(n.name, n.inputs[0], n.output, a["lo"], a["hi"], dt, n.origin),
            ok,
            code,
            msg,
            host,
        )

    def qlinear_binary(self, n: Node) -> None:
        """A standalone QLinearAdd/QLinearMul (not fused into an epilogue) runs on the host:
        the NPU's standalone unit has no such op. It runs as the com.microsoft op itself in
        ONNX Runtime, with the constant operand in a shape giving ORT the same span mode."""
        a = n.attrs
        p = a["params"]
        x = self.g.values[n.inputs[0]]
        const = np.asarray(a["const"], dtype=np.dtype(p["dtype"]))
        if a["mode"] != "general":
            const = const[:1]  # a scalar operand: one value for every column
        c_name = f"{n.name}.const"
        names = {}
        consts: dict[str, np.ndarray] = {c_name: const}
        for k in ("a_scale", "b_scale", "c_scale"):
            names[k] = f"{n.name}.{k}"
            consts[names[k]] = np.asarray(p[k], dtype=np.float32)
        for k in ("a_zp", "b_zp", "c_zp"):
            names[k] = f"{n.name}.{k}"
            consts[names[k]] = np.asarray(p[k], dtype=np.dtype(p["dtype"]))
        a_in, b_in = (x.name, c_name) if a["x_is_a"] else (c_name, x.name)
        node = oh.make_node(
            a["binary"],
            [a_in, names["a_scale"], names["a_zp"], b_in, names["b_scale"], names["b_zp"],
             names["c_scale"], names["c_zp"]],
            [n.output],
            domain="com.microsoft",
        )  # fmt: skip
        y = self.g.values[n.output]
        m = submodel([node], {x.name: x}, consts, {y.name: y}, {"": 17, "com.microsoft": 1})
        self.diag(
            n,
            ReasonCode.UNSUPPORTED_OP,
            f"{', '.join(n.origin)} ({a['binary']}) stays on the host: not fused into a "
            f"compute op's epilogue and '{self.t.name}' has no standalone {a['binary']}",
        )
        self.steps.append(self.host_onnx(n, m))

    def reshape_step(self, n: Node, x: Value, y: Value) -> HostOnnx | NpuMove:
        """The reshape `x` -> `y` after an NPU op (leading unit dims): an NPU gather where
        the target moves data (index map proven), else a host Reshape."""
        r = Node(f"{n.name}.reshape", "reshape", [x.name], [y.name], {"shape": tuple(y.shape)})
        mv = self.npu_move(r, x, y, n.origin)
        if mv is not None:
            return mv
        shape_name = f"{y.name}.shape"
        node = oh.make_node("Reshape", [x.name, shape_name], [y.name])
        consts = {shape_name: np.asarray(y.shape, dtype=np.int64)}
        return one_node_step(f"{n.name}.reshape", node, x, consts, y, n)

    def on_npu(self, name: str) -> bool:
        """Whether an NPU step lowered so far produces `name`."""
        return any(isinstance(st, NPU_STEPS) and name in step_writes(st) for st in self.steps)

    def layout(self, n: Node) -> None:
        """Reshape/Transpose/Identity of an NPU result: an NPU gather (`npu_move`); any
        other runs on the host as a one-node ONNX model."""
        x, y = self.g.values[n.inputs[0]], self.g.values[n.output]
        if self.on_npu(x.name):
            mv = self.npu_move(n, x, y, n.origin)
            if mv is not None:
                self.steps.append(mv)
                return
        consts = {}
        if n.op == "reshape":
            consts[f"{n.name}.shape"] = np.asarray(y.shape, dtype=np.int64)
            node = oh.make_node("Reshape", [x.name, f"{n.name}.shape"], [y.name])
        elif n.op == "transpose":
            node = oh.make_node("Transpose", [x.name], [y.name], perm=list(n.attrs["perm"]))
        elif n.op == "slice":
            names = [f"{n.name}.{k}" for k in ("starts", "ends", "axes", "steps")]
            st, sp = n.attrs["starts"], n.attrs["steps"]
            ends = [
                s + k * d if k > 0 or s + k * d >= 0 else -(2**62)
                for s, k, d in zip(st, sp, y.shape, strict=True)
            ]
            for name, v in zip(names, (st, ends, range(len(st)), sp), strict=True):
                consts[name] = np.asarray(list(v), dtype=np.int64)
            node = oh.make_node("Slice", [x.name, *names], [y.name])
        else:
            node = oh.make_node("Identity", [x.name], [y.name])
        m = submodel([node], {x.name: x}, consts, {y.name: y}, {"": 17})
        self.steps.append(self.host_onnx(n, m))

    def host_onnx(self, n: Node, m: onnx.ModelProto) -> HostOnnx:
        specs = tuple(
            TensorSpec(o, self.g.values[o].dtype, tuple(self.g.values[o].shape)) for o in n.outputs
        )
        level = str(n.attrs.get("ort_level", "off"))
        return HostOnnx(
            n.name,
            m.SerializeToString(),
            tuple(n.inputs),
            tuple(n.outputs),
            specs,
            tuple(n.origin),
            level,
        )

    @functools.cached_property
    def _origin_index(self):
        """The original model's nodes, their positions (by id), producers by output and
        initializers by name: built once per lowering, not per host fallback."""
        model = self.ctx.state.model
        nodes = list(model.graph.node)
        pos = {id(p): k for k, p in enumerate(nodes)}
        producer = {o: p for p in nodes for o in p.output}
        inits = {i.name: i for i in model.graph.initializer}
        return nodes, pos, producer, inits

    def host_origin(self, n: Node) -> list:
        """The node's original ONNX nodes as a host subgraph (exactly what ONNX Runtime runs).

        A matmul the frontend split out of a com.microsoft op (MatMulIntegerToFloat,
        DynamicQuantizeMatMul) carries its own ONNX form (`host_form`: the MatMulInteger
        it is, with its constants)."""
        form = n.attrs.get("host_form")
        if form is not None:
            protos = [onnx.NodeProto.FromString(b) for b in form["nodes"]]
            ins = {i: self.g.values[i] for i in n.inputs}
            out = {n.output: self.g.values[n.output]}
            return [self.host_onnx(n, submodel(protos, ins, form["consts"], out, self.g.opsets))]
        nodes, pos, producer, inits = self._origin_index
        protos = [p for p in nodes if (p.name or p.output[0]) in n.origin]
        # Identity / no-op Reshape / Transpose nodes that cleanup bypassed (and Constants)
        # between the IR inputs and the origin nodes: ONNX Runtime runs them too.
        while True:
            produced = {o for p in protos for o in p.output}
            missing = [
                i
                for p in protos
                for i in p.input
                if i and i not in produced and i not in inits and i not in n.inputs
            ]
            add = {
                id(producer[i]): producer[i]
                for i in missing
                if i in producer and producer[i].op_type in _VALUE_PRESERVING
            }
            if not add:
                break
            protos += add.values()
        protos.sort(key=lambda p: pos[id(p)])
        consts = {i: numpy_helper.to_array(inits[i]) for p in protos for i in p.input if i in inits}
        if protos and protos[-1].output[0] != n.output:
            protos.append(oh.make_node("Identity", [protos[-1].output[0]], [n.output]))
        ins = {i: self.g.values[i] for i in n.inputs if i not in produced}
        m = submodel(protos, ins, consts, {o: self.g.values[o] for o in n.outputs}, self.g.opsets)
        return [self.host_onnx(n, m)]

    def run(self) -> LoweredModel:
        for n in self.g.nodes:
            if n.op in ("matmul", "fused"):
                self.matmul(n)
            elif n.op == "matmul_act":
                self.matmul_act(n)
            elif n.op == "lut":
                self.lut(n)
            elif n.op == "requantize":
                self.requantize(n)
            elif n.op == "clip":
                self.clip(n)
            elif n.op == "qlinear_binary":
                self.qlinear_binary(n)
            elif n.op == "eltwise":
                self.eltwise(n)
            elif n.op == "max_pool":
                self.max_pool(n)
            elif n.op == "concat":
                self.concat(n)
            elif n.op in ("reshape", "transpose", "identity", "slice"):
                self.layout(n)
            elif n.op == "host_onnx":
                self.steps.append(self.host_onnx(n, host_model(n, self.g.values, self.g.opsets)))
            else:
                raise ValueError(f"no lowering for IR op {n.op}")
        self.drop_dead_moves()
        ins = [
            TensorSpec(i, self.g.values[i].dtype, tuple(self.g.values[i].shape))
            for i in self.g.inputs
        ]
        return LoweredModel(ins, list(self.g.outputs), self.consts, self.steps)


def run(g: Graph, ctx: Context) -> Graph:
    ctx.state.diagnostics = []
    ctx.state.lowered = Lowerer(g, ctx).run()
    return g
