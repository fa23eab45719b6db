"""A bias ONNX Runtime runs in float inside an integer chain: DQ(x) -> Add(DQ(c)) -> Q.

Under the integer QDQ reading, ORT's transformers turn DQ -> MatMul -> Q into a
QLinearMatMul but, on x86-64, leave an int8 bias group DequantizeLinear -> Add(constant
DequantizeLinear) -> QuantizeLinear as float ops (it has no int8 QLinearAdd there). Per
output column the group is a function of one 8-bit value; its exact table is taken from
ORT itself (the group's own ONNX nodes run on all 256 values:
`compiler.ort.tables.float_bias_tables`), so the fusion's `before` side is what ORT
computes, and the target's add stage (or a bias folded into the accumulator) is checked
against it like a QLinearAdd. This module only recognises the group in a site's chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import onnx

from compiler.ir.graph import Graph, Node
from prover.inttypes import int_tuple

if TYPE_CHECKING:  # a Site holds its FloatBias (site.py imports this module)
    from compiler.ir.site import Site

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


def node_proto(n: Node) -> onnx.NodeProto | None:
    """The one ONNX node a host node runs, or None."""
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
    p = node_proto(n)
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
        if c is None or c.inputs:
            return None
        cq = _qparams(c, "DequantizeLinear")
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
        const = int_tuple(np.broadcast_to(data.reshape(-1), (n_cols,)))
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
