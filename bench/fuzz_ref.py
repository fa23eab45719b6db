"""The reference side of the differential fuzzer: what ONNX Runtime computes.

- `OrtReference.values(feeds, level)`: every integer value of the graph, computed by ONNX
  Runtime at an optimisation level (the whole graph, its intermediates exposed),
  the project's `Requantize` (which ONNX Runtime does not know) by the kernel's
  definition of it;
- `OrtReference.outputs(model, feeds, level)`: the whole graph at an optimisation level
  ("off" or "default": at the default level ORT's QDQ transformers run integer kernels);
- `profiles(name)`: the named reference profile and the one this machine's ORT matches
  (`compiler.ort.reference_host`, which probes ORT once: u8s8 pair saturation, MLAS FMA).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper as oh
from onnx import numpy_helper as nh

from prover.domain import NUMPY
from prover.terms import Var, evaluate, op

PROJECT_DOMAIN = "ai.npufusion"
FLOAT_PRODUCERS = ("DequantizeLinear", "Sigmoid", "Tanh", "Relu", "MatMul", "Gemm")
LEVELS = {
    "off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "default": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class ReferenceUndefined(Exception):
    """The reference itself is undefined on this input (a Requantize precondition fails)."""


def session(model_bytes: bytes, level: str = "off") -> ort.InferenceSession:
    """A single-threaded CPU session at an optimisation level (quiet logging)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


class OrtReference:
    """ONNX Runtime on one model, with sessions cached per node and per level."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.consts = {i.name: nh.to_array(i) for i in model.graph.initializer}
        self.opsets = list(model.opset_import)
        self._node_sessions: dict[tuple, tuple[ort.InferenceSession, list[str]]] = {}
        # intermediates whose exposure would change ORT's rewrite: not the reference's values
        self.unreliable: set[str] = set()
        self._sessions: dict[str, ort.InferenceSession] = {}

    def outputs(self, feeds: dict[str, np.ndarray], level: str) -> dict[str, np.ndarray]:
        """Graph outputs of the whole model at `level` ("off" | "default")."""
        if level not in self._sessions:
            self._sessions[level] = session(self.model.SerializeToString(), level)
        sess = self._sessions[level]
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds), strict=True))

    def values(self, feeds: dict[str, np.ndarray], level: str = "off") -> dict[str, np.ndarray]:
        """Graph inputs, integer intermediates and outputs, at optimisation `level`.

        Runs of standard nodes run as one graph (not node by node: at every level ORT
        keeps a float16 chain such as DequantizeLinear -> Sigmoid -> QuantizeLinear in
        float32 between nodes, which single-node sessions would round to float16), with
        every integer value exposed as an extra output; a project `Requantize` between
        runs is evaluated by the kernel. (At the default level an exposed value can stop
        one of ORT's fusions: compare the outputs with `outputs()` before trusting them.)
        """
        env = dict(feeds)
        run: list[tuple[int, onnx.NodeProto]] = []
        for i, n in enumerate(self.model.graph.node):
            if n.domain == PROJECT_DOMAIN:
                self._run_segment(run, env, level)
                run = []
                env[n.output[0]] = self._requantize(n, env[n.input[0]])
            else:
                run.append((i, n))
        self._run_segment(run, env, level)
        return env

    def _run_segment(self, run: list[tuple[int, onnx.NodeProto]], env: dict, level: str) -> None:
        if not run:
            return
        key = (level, *(i for i, _ in run))
        nodes = [n for _, n in run]
        produced = [o for n in nodes for o in n.output]
        graph_outs = {o.name for o in self.model.graph.output}
        needed = [x for n in nodes for x in n.input if x and x not in self.consts]
        ins = list(dict.fromkeys(x for x in needed if x not in produced))
        vis = [
            oh.make_tensor_value_info(
                x, oh.np_dtype_to_tensor_dtype(env[x].dtype), list(env[x].shape)
            )
            for x in ins
        ]
        used = {x for n in nodes for x in n.input}
        inits = [nh.from_array(v, k) for k, v in self.consts.items() if k in used]
        floats = self._float_values(nodes, vis, inits)
        # exposing a float intermediate would stop ORT's fusions of the float subgraph
        outs = [
            o
            for n in nodes
            for o in n.output
            if (n.op_type not in FLOAT_PRODUCERS and o not in floats) or o in graph_outs
        ]
        cached = self._node_sessions.get(key)
        if cached is None:
            blob = self._segment(nodes, vis, inits, outs)
            if level == "default":
                # an exposed intermediate can change ORT's rewrite of the segment (e.g. make
                # DQ -> Softmax -> Q a QLinearSoftmax): then only the values the graph itself
                # hands on are the reference's, and the others are not reported
                inside = {id(n) for n in nodes}
                later = {x for n in self.model.graph.node if id(n) not in inside for x in n.input}
                kept = [o for o in outs if o in graph_outs or o in later]
                plain = self._segment(nodes, vis, inits, kept)
                if kept != outs and _rewrite(blob) != _rewrite(plain):
                    blob, outs = plain, kept
                    self.unreliable.update(set(produced) - set(kept))
            cached = (session(blob, level), outs)
            self._node_sessions[key] = cached
        sess, outs = cached
        vals = sess.run(outs, {x: env[x] for x in ins})
        env.update(zip(outs, vals, strict=True))

    def _segment(self, nodes, vis, inits, outs) -> bytes:
        vouts = [onnx.ValueInfoProto(name=o) for o in outs]
        g = oh.make_graph(nodes, "segment", vis, vouts, inits)
        m = oh.make_model(g, opset_imports=self.opsets)
        m.ir_version = self.model.ir_version
        return m.SerializeToString()

    def _float_values(self, nodes, vis, inits) -> set[str]:
        """Values of `nodes` that ONNX shape inference types as float (float32/16)."""
        g = oh.make_graph(nodes, "segment", vis, [], inits)
        m = oh.make_model(g, opset_imports=self.opsets)
        m.ir_version = self.model.ir_version
        try:
            m = onnx.shape_inference.infer_shapes(m)
        except Exception:  # noqa: BLE001 - no types known: expose as before
            return set()
        fl = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
        return {vi.name for vi in m.graph.value_info if vi.type.tensor_type.elem_type in fl}

    @staticmethod
    def _requantize(n: onnx.NodeProto, x: np.ndarray) -> np.ndarray:
        a = {at.name: oh.get_attribute_value(at) for at in n.attribute}
        text = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
        out = text.get("output_type", "int8")
        zp = int(a.get("zero_point", 0))
        rounding = text.get("rounding", "double")
        if rounding == "float":
            t = op("requant_float", Var("x"), scale=float(np.float32(a["scale"])), zp=zp, out=out)
        else:
            prim = {"double": "requant_double", "single": "requant_single"}[rounding]
            t = op(
                prim,
                Var("x"),
                multiplier=int(a["multiplier"]),
                shift=int(a["shift"]),
                zp=zp,
                out=out,
            )
        pre: list[Any] = []
        y = evaluate(t, NUMPY, {"x": np.asarray(x, np.int64)}, pre)
        for p in pre:
            if not np.all(p):
                raise ReferenceUndefined(f"Requantize '{n.name}' precondition fails on this input")
        return np.asarray(y).astype(out)


@lru_cache(maxsize=256)
def _rewrite(blob: bytes) -> list[tuple[str, str]]:
    """(domain, op type) of the kernels ORT's default level runs for a serialised model."""
    from compiler.errors import FrontendError
    from compiler.frontend.f16_context import ort_graph

    try:
        g = onnx.load_from_string(ort_graph(blob, "default", "a fuzzer segment")).graph
    except FrontendError:  # ORT cannot load it: the session says why
        return []
    return sorted((n.domain or "", n.op_type) for n in g.node)


@lru_cache(maxsize=8)
def profiles(reference: str) -> tuple[Any, Any]:
    """(the named reference profile, the profile this machine's ORT matches)."""
    from compiler.ort.reference_host import host_profile, resolve_reference

    return resolve_reference(reference), host_profile()
