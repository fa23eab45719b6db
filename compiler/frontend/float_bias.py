"""A bias ONNX Runtime runs in float inside an integer chain: DQ(x) -> Add(DQ(c)) -> Q.

Under the integer QDQ reading, ORT's transformers turn DQ -> MatMul -> Q into a
QLinearMatMul but, on x86-64, leave an int8 bias group DequantizeLinear -> Add(constant
DequantizeLinear) -> QuantizeLinear as float ops (it has no int8 QLinearAdd there). Per
output column the group is a function of one 8-bit value; its exact table is taken from
ORT itself (the group's own ONNX nodes run on all 256 values), so the fusion's `before`
side is what ORT computes, and the target's add stage (or a bias folded into the
accumulator) is checked against it like a QLinearAdd.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from compiler.ir.graph import Graph, Node
from compiler.ir.site import Site
from prover.inttypes import int_type

EIGHT_BIT = ("int8", "uint8")


@dataclass(kw_only=True)
class FloatBias:
    """The recognised group: chain indices, its parameters, and ORT's per-column tables."""

    start: int  # index in site.chain of the DequantizeLinear (Add at start+1, Q at start+2)
    const_node: Node  # the constant DequantizeLinear feeding the Add
    x_type: str
    x_scale: float
    x_zp: int
    const: tuple[int, ...]  # one per output column
    const_type: str
    const_scale: float
    const_zp: int
    y_scale: float
    y_zp: int
    tables: tuple[tuple[int, ...], ...] = field(default=(), repr=False)

    @property
    def end(self) -> int:
        return self.start + 2


def _proto(n: Node) -> onnx.NodeProto | None:
    protos = n.attrs.get("nodes") or []
    return onnx.NodeProto.FromString(protos[0]) if len(protos) == 1 else None


def _scalar(n: Node, p: onnx.NodeProto, k: int) -> np.ndarray | None:
    consts = n.attrs.get("consts") or {}
    if len(p.input) <= k or p.input[k] not in consts:
        return None
    v = np.asarray(consts[p.input[k]])
    return v.reshape(()) if v.size == 1 else None


def _qparams(n: Node, op: str) -> tuple[onnx.NodeProto, float, int, str] | None:
    """(proto, scale, zero point, 8-bit type) of a per-tensor host DQ/Q node, else None."""
    if n.op != "host_onnx" or n.attrs.get("onnx_op") != op:
        return None
    p = _proto(n)
    if p is None or p.domain not in ("", "ai.onnx"):
        return None
    if any(a.name not in ("axis",) for a in p.attribute):
        return None
    s, z = _scalar(n, p, 1), _scalar(n, p, 2)
    if s is None or z is None or z.dtype.name not in EIGHT_BIT or s.dtype != np.float32:
        return None
    return p, float(s), int(z), z.dtype.name


def recognize(g: Graph, site: Site, stage_out: str) -> FloatBias | None:
    """The float bias group right after the requantization (value `stage_out`), if any."""
    names = [n.attrs.get("onnx_op") if n.op == "host_onnx" else None for n in site.chain]
    for i in range(len(site.chain) - 2):
        if names[i : i + 3] != ["DequantizeLinear", "Add", "QuantizeLinear"]:
            continue
        dq, add, q = site.chain[i : i + 3]
        if dq.inputs != [stage_out]:
            return None
        x, y = _qparams(dq, "DequantizeLinear"), _qparams(q, "QuantizeLinear")
        others = [v for v in add.inputs if v != dq.output]
        if x is None or y is None or len(add.inputs) != 2 or len(others) != 1:
            return None
        c = g.producer(others[0])
        cq = None if c is None or c.inputs else _qparams(c, "DequantizeLinear")
        if cq is None or len(g.users(c.output)) != 1 or c.output in g.outputs:
            return None
        cp = cq[0]
        data = np.asarray((c.attrs.get("consts") or {}).get(cp.input[0]))
        n_cols = int(g.values[add.output].shape[-1])
        if data.dtype.name not in EIGHT_BIT or data.size not in (1, n_cols):
            return None
        if data.ndim and any(d != 1 for d in data.shape[:-1]):
            return None
        if x[3] != y[3] or g.values[stage_out].dtype != x[3]:
            return None  # the add stage keeps the intermediate type
        const = tuple(int(v) for v in np.broadcast_to(data.reshape(-1), (n_cols,)))
        return FloatBias(
            start=i,
            const_node=c,
            x_type=x[3],
            x_scale=x[1],
            x_zp=x[2],
            const=const,
            const_type=data.dtype.name,
            const_scale=cq[1],
            const_zp=cq[2],
            y_scale=y[1],
            y_zp=y[2],
        )
    return None


def ort_tables(g: Graph, site: Site, fb: FloatBias) -> tuple[tuple[int, ...], ...]:
    """ORT's value of the group for every 8-bit x, per column (the group's own nodes)."""
    from onnx import helper, numpy_helper

    from compiler.ort.tables import session

    dq, add, q = site.chain[fb.start : fb.start + 3]
    protos = [_proto(fb.const_node), _proto(dq), _proto(add), _proto(q)]
    consts: dict[str, np.ndarray] = {}
    for n in (fb.const_node, dq, add, q):
        consts.update({k: np.asarray(v) for k, v in (n.attrs.get("consts") or {}).items()})
    t = int_type(fb.x_type)
    n_cols = len(fb.const)
    xs = np.repeat(np.arange(t.min, t.max + 1)[:, None], n_cols, axis=1).astype(fb.x_type)
    x_name, y_name = dq.inputs[0], q.output
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(fb.x_type))
    graph = helper.make_graph(
        protos,
        "float_bias",
        [helper.make_tensor_value_info(x_name, elem, list(xs.shape))],
        [helper.make_tensor_value_info(y_name, elem, list(xs.shape))],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    opset = int(g.opsets.get("", g.opsets.get("ai.onnx", 13)))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    sess = session(m)
    y = np.asarray(sess.run(None, {x_name: xs})[0], dtype=np.int64)
    return tuple(tuple(int(v) for v in y[:, j]) for j in range(n_cols))
