"""Lowering data movement and keeping one layout on the NPU (a mixin of the lowering pass).

- `npu_move`: a Reshape/Flatten/Squeeze/Unsqueeze/Transpose/Identity (or a layout transpose
  around an NPU op) becomes an NPU strided gather (`npu_backend.moves`) only where the
  gather's index map is proven equal to the op's meaning (an `index_map` obligation);
- `kept_layout`: an NPU op reading the NCHW result of a layout transpose after another NPU
  op reads that op's channels-last output instead, the pair's index map proven the
  identity; `drop_dead_moves` then removes transposes nobody reads (Transposes stay only
  where data crosses to the host or is a graph output);
- `in_npu_layout`, `concat`, `max_pool`: elementwise tables, joins and max pools placed on
  an NPU result's own layout.

The mixin expects the lowering's attributes: `g`, `ctx`, `t`, `steps`, `moves`, `kept`,
`shapes`, and its `issues`, `diag`, `host_origin`, `host_onnx`.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from onnx import helper as oh

from compiler.ir.graph import Node, Value
from compiler.ir.layout import move_terms, transpose_chain_terms
from compiler.ir.site import Diagnostic
from compiler.ort.host import submodel
from compiler.proving import prove
from npu_backend.lowered import (
    HostOnnx,
    NpuClip,
    NpuConcat,
    NpuLut,
    NpuMatMul,
    NpuMaxPool,
    NpuMove,
    NpuRequant,
    TensorSpec,
    step_reads,
    step_writes,
)
from npu_backend.moves import row_major, transpose_strides
from prover.obligation import Obligation
from prover.policy import Policy
from prover.verdict import ReasonCode, Status


def one_node_step(name: str, node, x: Value, consts: dict, y: Value, n: Node) -> HostOnnx:
    """A host step running one ONNX node from `x` to `y` (a layout step around an NPU op)."""
    m = submodel([node], {x.name: x}, consts, {y.name: y}, {"": 17})
    spec = (TensorSpec(y.name, y.dtype, tuple(y.shape)),)
    return HostOnnx(name, m.SerializeToString(), (x.name,), (y.name,), spec, tuple(n.origin))


# types the NPU stores and moves; the NPU's steps
MOVABLE = ("int8", "uint8", "int16", "int32")
NPU_STEPS = (NpuMatMul, NpuLut, NpuRequant, NpuClip, NpuMove, NpuMaxPool, NpuConcat)


class LayoutLowering:
    """NPU data movement and one NPU layout: methods of the lowering (`Lowerer`)."""

    g: Any
    ctx: Any
    t: Any
    steps: list
    moves: dict[str, tuple[str, tuple[int, ...], HostOnnx | NpuMove]]
    kept: set[str]
    shapes: dict[str, tuple[int, ...]]

    # defined by the lowering (`compiler.passes.lower.Lowerer`)
    def issues(self, step: Any, values: tuple[Value, ...] = ()) -> list:
        raise NotImplementedError

    def diag(self, n: Node, code: ReasonCode, message: str) -> None:
        raise NotImplementedError

    def host_origin(self, n: Node) -> list:
        raise NotImplementedError

    def host_onnx(self, n: Node, m: Any) -> HostOnnx:
        raise NotImplementedError

    def emitted(self, name: str) -> bool:
        """Whether a step lowered so far writes `name` (`<x>.nhwc` is always the same
        transpose of x: a second reader of x reads the first one's)."""
        return any(name in step_writes(st) for st in self.steps)

    def kept_layout(self, n: Node, x: Value, nat_in: Value, perm: tuple[int, ...]) -> str | None:
        """The NPU tensor holding `x` already permuted by `perm` (an NPU op's natural output
        that a layout transpose made `x`), if the index map from it through that transpose
        and `perm` is proven the identity; else None (the transpose is emitted)."""
        move = self.moves.get(x.name)
        if move is None:
            return None
        src, first, _ = move
        if tuple(self.shapes.get(src, ())) != tuple(nat_in.shape):
            return None
        ob = _chain_obligation(tuple(nat_in.shape), tuple(first), tuple(perm))
        v = prove.check(ob, self.ctx)
        if isinstance(v, Exception) or v.status != Status.PROVEN:
            return None
        self.kept.add(x.name)
        return src

    def drop_dead_moves(self) -> None:
        """Remove the layout transposes after NPU ops whose result nothing reads any more
        (every reader takes the NPU's own layout, `kept_layout`)."""
        live = set(self.g.outputs)
        keep: list = []
        dead = {id(t) for name, (_, _, t) in self.moves.items() if name in self.kept}
        for st in reversed(self.steps):
            outs = set(step_writes(st))
            if id(st) in dead and not outs & live:
                continue
            keep.append(st)
            live |= set(step_reads(st))
        self.steps = keep[::-1]

    def max_pool(self, n: Node) -> None:
        """An integer MaxPool on the Pool unit, channels-last (reading an NPU op's own layout
        where it can: `kept_layout`), else the original node on the host with the reason."""
        x, y = self.g.values[n.inputs[0]], self.g.values[n.output]
        r = len(y.shape) - 2
        to_last, to_first = (0, *range(2, r + 2), 1), (0, r + 1, *range(1, r + 1))
        nat_in = Value(f"{x.name}.nhwc", x.dtype, tuple(x.shape[i] for i in to_last))
        nat_out = Value(f"{y.name}.natural", y.dtype, tuple(y.shape[i] for i in to_last))
        step = NpuMaxPool(
            name=n.name, x=nat_in.name, out=nat_out.name, window=n.attrs["window"],
            dtype=y.dtype, onnx_nodes=tuple(n.origin),
        )  # fmt: skip
        issues = self.issues(step, (nat_in, nat_out))
        if issues:
            code, msg = ReasonCode(issues[0].code), issues[0].message
            self.diag(n, code, f"{', '.join(n.origin)} stays on the host: {msg}")
            self.steps.extend(self.host_origin(n))
            return
        kept = self.kept_layout(n, x, nat_in, to_last)
        if kept is not None:
            step = dataclasses.replace(step, x=kept)
        elif not self.emitted(nat_in.name):  # else an earlier reader's transpose
            self.steps.append(self.transpose_step(n, x, nat_in, to_last))
        self.steps.append(step)
        self.shapes[step.out] = tuple(nat_out.shape)
        t = self.transpose_step(n, nat_out, y, to_first)
        self.moves[y.name] = (nat_out.name, to_first, t)
        self.steps.append(t)

    def transpose_step(self, n: Node, x: Value, y: Value, perm) -> HostOnnx | NpuMove:
        """The layout transpose `x` -> `y` around an NPU op: an NPU gather where the target
        moves data (its index map proven), else a host Transpose."""
        t = Node(f"{y.name}.transpose", "transpose", [x.name], [y.name], {"perm": tuple(perm)})
        mv = self.npu_move(t, x, y, n.origin)
        if mv is not None:
            return mv
        node = oh.make_node("Transpose", [x.name], [y.name], perm=list(perm))
        return one_node_step(f"{y.name}.transpose", node, x, {}, y, n)

    def npu_move(self, n: Node, x: Value, y: Value, origin: tuple[str, ...]) -> NpuMove | None:
        """The NPU gather computing layout node `n` (`x` -> `y`), if the target moves data,
        the type is one it stores, and the gather's index map is proven to be the node's;
        else None (with a diagnostic when the proof failed)."""
        if not self.t.standalone.moves or x.dtype not in MOVABLE:
            return None
        offset = 0
        if n.op == "transpose":
            strides = transpose_strides(tuple(x.shape), tuple(n.attrs["perm"]))
        elif n.op == "slice":
            src = row_major(tuple(x.shape))
            strides = tuple(s * int(k) for s, k in zip(src, n.attrs["steps"], strict=True))
            offset = sum(s * int(b) for s, b in zip(src, n.attrs["starts"], strict=True))
        else:  # reshape, identity: the source's row-major order under the output's shape
            strides = row_major(tuple(y.shape))
        attrs = _hashable(n.attrs)
        if attrs is None:
            ob = _move_obligation(tuple(x.shape), n, tuple(y.shape), strides, offset)
        else:
            ob = _shared_move_obligation(
                tuple(x.shape), n.op, attrs, tuple(y.shape), strides, offset
            )
        v = prove.check(ob, self.ctx)
        if isinstance(v, Exception) or v.status != Status.PROVEN:
            why = v if isinstance(v, Exception) else v.reason
            self.ctx.state.diagnostics.append(
                Diagnostic(
                    ReasonCode.LAYOUT_MISMATCH,
                    list(origin),
                    f"{', '.join(origin)}: the NPU gather's index map is not proven: {why}",
                )
            )
            return None
        step = NpuMove(n.name, x.name, y.name, tuple(y.shape), strides, offset, y.dtype, origin)
        return None if self.issues(step, (x, y)) else step

    def in_npu_layout(self, n: Node, step: NpuLut) -> bool:
        """Place elementwise `step` on the NPU op's own layout when its input is a layout
        transpose of an NPU result (elementwise ops commute with any permutation): it reads
        the NPU result and its output gets the same transpose, which `drop_dead_moves`
        removes when every reader takes the NPU's layout too. False: nothing placed."""
        move = self.moves.get(step.x)
        if move is None or move[0] not in self.shapes:
            return False
        src, perm, _ = move
        y = self.g.values[n.output]
        nat = Value(f"{y.name}.natural", y.dtype, self.shapes[src])
        self.steps.append(dataclasses.replace(step, x=src, out=nat.name))
        self.shapes[nat.name] = tuple(nat.shape)
        self.kept.add(step.x)
        t = self.transpose_step(n, nat, y, perm)
        self.moves[y.name] = (nat.name, perm, t)
        self.steps.append(t)
        return True

    def concat(self, n: Node) -> None:
        """A concat on the NPU. Where every input is a layout transpose (one permutation) of
        an NPU result, the NPU results are joined along the permuted axis and the join gets
        that transpose (concat(transpose(s_i, P), a) = transpose(concat(s_i, P[a]), P)); else
        the IR values are joined; without a data movement unit, the host's Concat."""
        y = self.g.values[n.output]
        axis = int(n.attrs["axis"])
        moves = [self.moves.get(i) for i in n.inputs]
        perms = {m[1] for m in moves if m is not None}
        if all(m is not None and m[0] in self.shapes for m in moves) and len(perms) == 1:
            (perm,) = perms
            srcs = [m[0] for m in moves if m is not None]
            shape = list(self.shapes[srcs[0]])
            shape[perm[axis]] = sum(self.shapes[s][perm[axis]] for s in srcs)
            nat = Value(f"{y.name}.natural", y.dtype, tuple(shape))
            step = NpuConcat(n.name, tuple(srcs), nat.name, perm[axis], y.dtype, tuple(n.origin))
            values = (nat, *(Value(s, y.dtype, self.shapes[s]) for s in srcs))
            if self.t.standalone.moves and not self.issues(step, values):
                self.steps.append(step)
                self.shapes[nat.name] = tuple(nat.shape)
                self.kept.update(n.inputs)
                t = self.transpose_step(n, nat, y, perm)
                self.moves[y.name] = (nat.name, perm, t)
                self.steps.append(t)
                return
        step = NpuConcat(n.name, tuple(n.inputs), y.name, axis, y.dtype, tuple(n.origin))
        if not self.issues(step):
            self.steps.append(step)
            return
        node = oh.make_node("Concat", list(n.inputs), [y.name], axis=axis)
        ins = {i: self.g.values[i] for i in n.inputs}
        m = submodel([node], ins, {}, {y.name: y}, {"": 17})
        why = self.issues(step)[0]
        self.diag(
            n, ReasonCode(why.code), f"{', '.join(n.origin)} stays on the host: {why.message}"
        )
        self.steps.append(self.host_onnx(n, m))


# A model's layout moves repeat (every block's transposes around its convs have the same
# shapes): each distinct gather's obligation is built, and its hash taken, once. The note
# names what the obligation is about (shapes, op), which every node sharing it has.


@lru_cache(maxsize=1024)
def _chain_obligation(
    src: tuple[int, ...], first: tuple[int, ...], perm: tuple[int, ...]
) -> Obligation:
    before, after, size = transpose_chain_terms(src, [first, perm])
    note = f"layout {list(src)} transposed by {list(first)} then {list(perm)}"
    return Obligation("index_map", before, after, {"f": (0, size - 1)}, Policy(0), note=note)


def _hashable(attrs: dict[str, Any]) -> tuple | None:
    """The node's attributes as a cache key, None when one is not hashable."""
    key = tuple(sorted(attrs.items()))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _move_obligation(
    src: tuple[int, ...],
    node: Node,
    out: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
) -> Obligation:
    """The index-map obligation of layout node `node` from `src` to `out` against the NPU
    gather of `strides` and `offset`."""
    before, after, size = move_terms(src, node, out, strides, offset)
    note = f"move {node.op} {list(src)} -> {list(out)}"
    return Obligation(
        "index_map", before, after, {"f": (0, max(size - 1, 0))}, Policy(0), note=note
    )


@lru_cache(maxsize=1024)
def _shared_move_obligation(
    src: tuple[int, ...],
    op: str,
    attrs: tuple,
    out: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
) -> Obligation:
    """`_move_obligation` of a node of `op` with attributes `attrs` (a hashable key), built
    once per distinct move."""
    node = Node("out", op, ["src"], ["out"], dict(attrs))
    return _move_obligation(src, node, out, strides, offset)
