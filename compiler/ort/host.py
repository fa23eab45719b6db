"""Host steps: ONNX nodes run by ONNX Runtime itself, exactly as in the original model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from compiler.ir.graph import Graph, Node, Value
from compiler.ir.semantics import register_evaluator
from compiler.ort.tables import session

if TYPE_CHECKING:
    from compiler.ir.site import Diagnostic

# Every element type an IR value can have, by its IR name (numpy's, and `string` for ONNX
# STRING, held as numpy object arrays as ONNX Runtime returns them). The NPU uses the integer
# types; the others only live between host ops, which ONNX Runtime runs.
ONNX_OF = {
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "int16": TensorProto.INT16,
    "uint16": TensorProto.UINT16,
    "int32": TensorProto.INT32,
    "uint32": TensorProto.UINT32,
    "int64": TensorProto.INT64,
    "uint64": TensorProto.UINT64,
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "float64": TensorProto.DOUBLE,
    "bool": TensorProto.BOOL,
    "string": TensorProto.STRING,
}
NAME_OF = {v: k for k, v in ONNX_OF.items()}


def submodel(
    nodes: list[onnx.NodeProto],
    inputs: Mapping[str, Value],
    consts: Mapping[str, np.ndarray],
    outputs: Mapping[str, Value] | None,
    opsets: Mapping[str, int],
) -> onnx.ModelProto:
    """A standalone model of `nodes` with the given external inputs and constants."""
    ins = [
        oh.make_tensor_value_info(v.name, ONNX_OF[v.dtype], list(v.shape)) for v in inputs.values()
    ]
    if outputs is None:
        outs = [oh.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in nodes[-1].output]
    else:
        outs = [
            oh.make_tensor_value_info(v.name, ONNX_OF[v.dtype], list(v.shape))
            for v in outputs.values()
        ]
    inits = [numpy_helper.from_array(np.asarray(a), k) for k, a in consts.items()]
    g = oh.make_graph(list(nodes), "host", ins, outs, inits)
    ops = [oh.make_opsetid(d, v) for d, v in opsets.items()]
    return oh.make_model(g, opset_imports=ops)


def rename_host_value(node: Node, old: str, new: str) -> None:
    """Rename value `old` to `new` inside a `host_onnx` node's serialized ONNX nodes.

    A host node's IR inputs/outputs and the names its ONNX nodes read and write must
    agree; a pass that renames an IR edge of a host node calls this too.
    """
    protos = [onnx.NodeProto.FromString(b) for b in node.attrs["nodes"]]
    for p in protos:
        for field in (p.input, p.output):
            for k, name in enumerate(field):
                if name == old:
                    field[k] = new
    node.attrs["nodes"] = [p.SerializeToString() for p in protos]


def infer_host_outputs(nodes, inputs, consts, opsets) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Element type and static shape of every value `nodes` produce (ONNX shape inference).

    A type the IR has no name for is given by its ONNX name (e.g. `FLOAT16`). Outputs ONNX
    cannot infer, and those of ops outside the ONNX domain, are measured by running the
    nodes in ONNX Runtime on two different inputs of the given shapes; a shape that
    changes with the values is left out.
    """
    m = submodel(nodes, inputs, consts, None, opsets)
    # ORT's own kernels in the ONNX domain (its fusions' outputs) are unknown to ONNX: measured
    contrib = any(
        n.domain not in ("", "ai.onnx") or not onnx.defs.has(n.op_type, "") for n in nodes
    )
    m = onnx.shape_inference.infer_shapes(m, strict_mode=not contrib)
    out = {}
    for vi in list(m.graph.value_info) + list(m.graph.output):
        tt = vi.type.tensor_type
        static = tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)
        if tt.elem_type and static:  # an unknown rank is no shape
            name = NAME_OF.get(tt.elem_type) or TensorProto.DataType.Name(tt.elem_type)
            out[vi.name] = (name, tuple(int(d.dim_value) for d in tt.shape.dim))
    wanted = [o for o in nodes[-1].output if o]
    # ONNX's inference for other domains can disagree with the kernel ONNX Runtime runs
    # (ai.onnx.ml ArrayFeatureExtractor: ONNX says [], ORT returns [1, B]): measure those
    if contrib or any(o not in out for o in wanted):
        seen = _measured(nodes, inputs, consts, opsets)
        out.update({k: v for k, v in seen.items() if k in wanted and (contrib or k not in out)})
    return out


def _measured(nodes, inputs, consts, opsets) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Output types and shapes of `nodes` observed in ONNX Runtime (value-independent only)."""
    m = submodel(nodes, inputs, consts, None, opsets)
    del m.graph.output[:]
    m.graph.output.extend(onnx.ValueInfoProto(name=o) for o in nodes[-1].output if o)
    try:
        sess = session(m)
        runs = []
        for fill in (0, 1):
            feeds = {k: placeholder(v.dtype, v.shape, fill) for k, v in inputs.items()}
            runs.append(sess.run(None, feeds))
    except Exception:  # noqa: BLE001 - ORT cannot run it: the caller reports the node
        return {}
    out = {}
    for o, a, b in zip(nodes[-1].output, runs[0], runs[1], strict=False):
        a, b = np.asarray(a), np.asarray(b)
        name = "string" if a.dtype.kind in "OU" else a.dtype.name
        if a.shape == b.shape and a.dtype == b.dtype and name in ONNX_OF:
            out[o] = (name, tuple(int(d) for d in a.shape))
    return out


def host_model(
    node: Node, values: Mapping[str, Value], opsets: Mapping[str, int]
) -> onnx.ModelProto:
    """The ONNX model a `host_onnx` IR node stands for."""
    protos = [onnx.NodeProto.FromString(b) for b in node.attrs["nodes"]]
    return submodel(
        protos,
        {i: values[i] for i in node.inputs},
        node.attrs["consts"],
        {o: values[o] for o in node.outputs},
        opsets,
    )


def run_host(
    node: Node, values: Mapping[str, Value], opsets, env: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """Run a `host_onnx` node with ONNX Runtime on concrete inputs, at its `ort_level`."""
    m = host_model(node, values, opsets)
    sess = session(m, str(node.attrs.get("ort_level", "off")))
    feeds = {i: np.asarray(env[i]).astype(np.dtype(_np_name(values[i].dtype))) for i in node.inputs}
    return list(sess.run(None, feeds))


def _np_name(dtype: str) -> str:
    """The numpy dtype of an IR element type name (`string`: object, as ORT returns it)."""
    return "object" if dtype == "string" else dtype


def placeholder(dtype: str, shape: tuple[int, ...], fill: int = 0) -> np.ndarray:
    """An array of `shape` and IR type `dtype` holding `fill` (strings: its decimal text)."""
    if dtype == "string":
        return np.full(shape, str(fill), dtype=object)
    return np.full(shape, fill, dtype=np.dtype(dtype))


register_evaluator("host_onnx", lambda n, g, env: run_host(n, g.values, g.opsets, env))


def host_diagnostics(graph: Graph) -> list[Diagnostic]:
    """One `unsupported_op` diagnostic per ONNX op the frontend kept on the host.

    `graph` is the IR as the frontend built it (`host_onnx` nodes with a `placement`).
    """
    from compiler.ir.site import Diagnostic
    from prover.verdict import ReasonCode

    out = []
    for n in graph.nodes:
        why = n.attrs.get("placement") if n.op == "host_onnx" else None
        if why:
            out.append(Diagnostic(ReasonCode.UNSUPPORTED_OP, list(n.origin), why))
    return out
