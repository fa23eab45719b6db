"""Where ONNX Runtime puts the float32 casts of a float16 QDQ activation group.

ORT's CPU provider has no float16 Sigmoid/Tanh/Relu kernel: its InsertCastTransformer
(at every optimisation level, level off included) turns the group
DequantizeLinear -> act -> QuantizeLinear with float16 scales into float32 arithmetic,
and where it places the casts depends on the graph around the group, not on the group:

- `float16`: DequantizeLinear stays float16 and a Cast to float32 follows it (its output
  is rounded to float16), e.g. when its input is a graph input;
- `float32`: the scale is cast to float32 (or, at the default level, folded into a float32
  initializer) and DequantizeLinear computes in float32 (its output is never rounded to
  float16), e.g. when its input is produced by another node (a QLinearMatMul, even an
  Identity at level off, which the default level removes).

In both, the activation runs in float32 and a Cast to float16 feeds QuantizeLinear.
Rather than re-deriving the transformer's rules, `ort_dequantize_types` reads the graph
ORT itself runs at the reference's level; `decorated_groups` recognises both forms in such
a graph (the integer QDQ reading reads one). Any other placement is not modelled.
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import onnx
from onnx import TensorProto

from compiler.errors import FrontendError
from compiler.ort.options import session_options

QDQ_ACTS = ("Sigmoid", "Tanh", "Relu")
DEFAULT_DOMAINS = ("", "ai.onnx")


def _cast_to(n: onnx.NodeProto) -> int | None:
    if n.op_type != "Cast" or n.domain not in DEFAULT_DOMAINS:
        return None
    return next((int(a.i) for a in n.attribute if a.name == "to"), None)


def _scale_type(name: str, consts: dict[str, int], prod: dict[str, onnx.NodeProto]) -> int | None:
    """Element type of a constant scale: an initializer, or a Cast of one (ORT's cast)."""
    if name in consts:
        return consts[name]
    p = prod.get(name)
    if p is not None and _cast_to(p) is not None and p.input[0] in consts:
        return _cast_to(p)
    return None


def decorated_groups(g: onnx.GraphProto, single_use) -> dict[str, tuple[list[onnx.NodeProto], str]]:
    """Float16 activation groups with ORT's casts, by QuantizeLinear output name.

    Value: (members from DequantizeLinear to QuantizeLinear, excluding cast scales; the
    type of the DequantizeLinear output, `float16` or `float32`). `single_use(name)` says
    whether a value has exactly one consumer and is no graph output.
    """
    prod = {o: n for n in g.node for o in n.output}
    consts = {i.name: i.data_type for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.domain in DEFAULT_DOMAINS:
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = a.t.data_type
    out: dict[str, tuple[list[onnx.NodeProto], str]] = {}
    for q in g.node:
        if q.op_type != "QuantizeLinear" or q.domain not in DEFAULT_DOMAINS or len(q.input) < 2:
            continue
        if _scale_type(q.input[1], consts, prod) != TensorProto.FLOAT16:
            continue
        c16 = prod.get(q.input[0])
        if c16 is None or _cast_to(c16) != TensorProto.FLOAT16 or not single_use(q.input[0]):
            continue
        act = prod.get(c16.input[0])
        if act is None or act.op_type not in QDQ_ACTS or act.domain not in DEFAULT_DOMAINS:
            continue
        if not single_use(c16.input[0]):
            continue
        src = prod.get(act.input[0])
        if src is None or not single_use(act.input[0]):
            continue
        if _cast_to(src) == TensorProto.FLOAT:
            dq = prod.get(src.input[0])
            members, dq_type, want = [dq, src, act, c16, q], "float16", TensorProto.FLOAT16
            if dq is None or not single_use(src.input[0]):
                continue
        else:
            dq, members, dq_type, want = src, [src, act, c16, q], "float32", TensorProto.FLOAT
        if dq.op_type != "DequantizeLinear" or dq.domain not in DEFAULT_DOMAINS:
            continue
        if dq.input[0] in consts or _scale_type(dq.input[1], consts, prod) != want:
            continue
        out[q.output[0]] = (members, dq_type)
    return out


@lru_cache(maxsize=8)  # keys hold whole models: a few per check, not a zoo's worth
def ort_graph(model_bytes: bytes, level: str, what: str = "float16 QDQ groups") -> bytes:
    """The serialised graph ONNX Runtime runs for `model_bytes` at `level` ("off",
    "extended" or "default"). Raises `FrontendError` naming `what` when ORT cannot load it.
    """
    from npu_backend.ort_logging import onnxruntime_module

    ort = onnxruntime_module()
    so = session_options(level)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "ort_optimised.onnx"
        so.optimized_model_filepath = str(out)
        try:
            ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - ORT's own message, on one line
            msg = " ".join(str(e).split())[:300]
            raise FrontendError(
                f"ONNX Runtime cannot load the model to read its {what}: {msg}"
            ) from None
        return out.read_bytes()


PROJECT_DOMAIN = "ai.npufusion"
_INT_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
              "uint16": TensorProto.UINT16, "int32": TensorProto.INT32}  # fmt: skip


def without_project_ops(m: onnx.ModelProto) -> onnx.ModelProto:
    """`m` with each project-domain node (ONNX Runtime cannot run it) cut out: its outputs
    become graph inputs and its inputs graph outputs, as when ORT runs the standard nodes
    around it and the project's kernel runs in between."""
    proj = [n for n in m.graph.node if n.domain == PROJECT_DOMAIN]
    if not proj:
        return m
    r = onnx.ModelProto()
    r.CopyFrom(m)
    known = {vi.name: vi for vi in [*m.graph.value_info, *m.graph.output]}
    keep = [n for n in r.graph.node if n.domain != PROJECT_DOMAIN]
    del r.graph.node[:]
    r.graph.node.extend(keep)
    have_out = {o.name for o in r.graph.output}
    for n in proj:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        t = attrs.get("output_type", b"int8")
        t = t.decode() if isinstance(t, bytes) else str(t)
        for o in n.output:
            if o in known:
                r.graph.input.append(known[o])
            else:
                tt = _INT_TYPES.get(t, TensorProto.INT8)
                r.graph.input.append(onnx.helper.make_tensor_value_info(o, tt, None))
        for i in n.input:
            if i and i not in have_out:
                r.graph.output.append(onnx.ValueInfoProto(name=i))
                have_out.add(i)
    ops = [o for o in r.opset_import if o.domain != PROJECT_DOMAIN]
    del r.opset_import[:]
    r.opset_import.extend(ops)
    return r


def ort_dequantize_types(m: onnx.ModelProto, level: str) -> dict[str, str]:
    """For each float16 activation group ORT runs at `level` ("off" or "default"): the type
    of its DequantizeLinear's output (see the module docstring), by QuantizeLinear output
    name and by `node:` + its node name.

    A group missing from the answer has a cast placement this module does not model.
    Project-domain nodes are cut out first (`without_project_ops`).
    """
    r = onnx.load_from_string(ort_graph(without_project_ops(m).SerializeToString(), level))
    users: dict[str, int] = {}
    for n in r.graph.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    outs = {o.name for o in r.graph.output}
    groups = decorated_groups(r.graph, lambda v: users.get(v, 0) == 1 and v not in outs)
    out: dict[str, str] = {}
    for k, (members, t) in groups.items():
        out[k] = t
        if members[-1].name:  # ORT may rename the output (its s8 -> u8 conversion)
            out[f"node:{members[-1].name}"] = t
    return out


def fold_cast(value, to: int):
    """A constant Cast as ONNX Runtime computes it, or None when not modelled exactly.

    Float-to-float casts round to nearest even (IEEE, as numpy); integer-to-integer or
    integer-to-float casts that keep every value exactly are folded too.
    """
    import numpy as np

    targets: dict[int, type[np.generic]] = {
        TensorProto.FLOAT: np.float32,
        TensorProto.FLOAT16: np.float16,
        TensorProto.DOUBLE: np.float64,
        TensorProto.INT8: np.int8,
        TensorProto.UINT8: np.uint8,
        TensorProto.INT16: np.int16,
        TensorProto.UINT16: np.uint16,
        TensorProto.INT32: np.int32,
        TensorProto.INT64: np.int64,
    }
    target = targets.get(to)
    v = np.asarray(value)
    if target is None or v.dtype.kind not in "fiu":
        return None
    if v.dtype.kind == "f" and np.dtype(target).kind == "f":
        with np.errstate(over="ignore"):
            return v.astype(target)
    if v.dtype.kind in "iu":
        c = v.astype(target)
        if np.array_equal(c.astype(np.float64), v.astype(np.float64)):
            return c
    return None
