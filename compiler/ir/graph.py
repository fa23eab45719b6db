"""The integer IR: typed values, nodes with one meaning each, producers and users.

Every op's meaning is a kernel primitive (see `compiler.ir.semantics`):

| op | meaning |
|---|---|
| `matmul` | exact accumulation `prover.matmul.matmul_acc`, then optionally the op's own requantization (`requant` attr: QLinearMatMul's float32 form); a conv over a window (`window` attr, `prover.conv.Window`) accumulates each output element's patch, `prover.conv.conv_acc` |
| `requantize` | `requant_double` / `requant_single` / `requant_float` |
| `clip` | `clip(lo, hi)` |
| `lut` | `lut(table)`: table in `offset` index order, one entry per input value |
| `slice` | `x[start + step * i]` per axis (`starts`, `steps`; the output's shape the counts) |
| `concat` | its inputs joined along `axis` (values unchanged) |
| `max_pool` | `prover.pool.max_pool` over its `window` (channels-first `layout`), padding never the max |
| `reshape`, `transpose`, `identity` | layout only: values unchanged, element positions moved |
| `fused` | a `matmul` whose epilogue (requantize, clip, table) runs in the NPU postprocessor |
| `host_onnx` | ONNX nodes run by ONNX Runtime itself (float ops, QuantizeLinear, DequantizeLinear) |
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OPS = (
    "matmul",
    "requantize",
    "clip",
    "lut",
    "max_pool",
    "concat",
    "slice",
    "reshape",
    "transpose",
    "identity",
    "fused",
    "host_onnx",
)
LAYOUT_OPS = ("reshape", "transpose", "identity")


@dataclass
class Value:
    """A tensor: name, element type name (`int8`, `int32`, `float32`...) and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass
class Node:
    """One IR op. `origin` lists the ONNX node names it stands for."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    origin: tuple[str, ...] = ()

    @property
    def output(self) -> str:
        return self.outputs[0]


@dataclass
class Graph:
    """A topologically ordered list of nodes over named values."""

    values: dict[str, Value]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opsets: dict[str, int] = field(default_factory=dict)
    # inputs whose leading (batch) dimension is symbolic in the ONNX model; the IR is built
    # for one concrete batch and rows are independent (compiler.frontend.batch)
    dynamic_batch: tuple[str, ...] = ()
    # the activation type the model as written gives each QDQ matmul (its compute node's
    # name -> "int8" / "uint8"): ORT on x86 moves QDQ int8 activations to uint8, so the IR
    # of an s8s8 model holds u8s8 matmuls; advice names what the user wrote (the frontend)
    qdq_activation_types: dict[str, str] = field(default_factory=dict)

    def producer(self, value: str) -> Node | None:
        for n in self.nodes:
            if value in n.outputs:
                return n
        return None

    def users(self, value: str) -> list[Node]:
        return [n for n in self.nodes if value in n.inputs]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def index(self, node: Node) -> int:
        return next(i for i, n in enumerate(self.nodes) if n is node)

    def replace_uses(self, old: str, new: str) -> None:
        """Point every consumer of `old` (and the graph outputs) at `new`."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove(self, nodes: Iterable[Node]) -> None:
        ids = {id(n) for n in nodes}
        self.nodes = [n for n in self.nodes if id(n) not in ids]
        self.prune_values()

    def prune_values(self) -> None:
        live = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            live |= set(n.inputs) | set(n.outputs)
        self.values = {k: v for k, v in self.values.items() if k in live}

    def clone(self) -> Graph:
        return copy.deepcopy(self)

    def fingerprint(self) -> str:
        """A canonical digest of the whole graph (used to show a pass changed nothing)."""
        h = hashlib.sha256()
        for name in sorted(self.values):
            v = self.values[name]
            h.update(f"{v.name}:{v.dtype}:{v.shape};".encode())
        h.update(repr((self.inputs, self.outputs)).encode())
        if self.dynamic_batch:
            h.update(repr(("dynamic_batch", self.dynamic_batch)).encode())
        for n in self.nodes:
            h.update(f"{n.name}|{n.op}|{n.inputs}|{n.outputs}|{n.origin}|".encode())
            for k in sorted(n.attrs):
                h.update(f"{k}=".encode() + _digest(n.attrs[k]) + b";")
        return h.hexdigest()

    def summary(self) -> list[str]:
        """One line per node: `name: op(inputs) -> outputs`."""
        return [
            f"{n.name}: {n.op}({', '.join(n.inputs)}) -> {', '.join(n.outputs)}" for n in self.nodes
        ]


def _digest(v: Any) -> bytes:
    if isinstance(v, np.ndarray):
        return (
            f"nd{v.dtype}{v.shape}".encode()
            + hashlib.sha256(np.ascontiguousarray(v).tobytes()).digest()
        )
    if isinstance(v, dict):
        return b"{" + b",".join(k.encode() + b":" + _digest(v[k]) for k in sorted(v)) + b"}"
    if isinstance(v, Sequence) and not isinstance(v, str | bytes):  # lists, lazy ones
        return b"[" + b",".join(_digest(x) for x in v) + b"]"
    if isinstance(v, bytes):
        return hashlib.sha256(v).digest()
    return repr(v).encode()
