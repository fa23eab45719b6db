"""Element correspondence through layout ops (Reshape, Transpose) between two values.

A fused op computes the compute op's output in its natural layout and stores it
under the activation's shape. That is only right when every element keeps its
row-major position, i.e. the layout ops between them only add or drop leading
unit dimensions. `first_moved` finds a hidden transpose concretely;
`index_map_terms` states the correspondence as an obligation over a symbolic
flat index (prover primitives `floordiv_const` / `mod_const`).
"""

from __future__ import annotations

import numpy as np

from npu_backend.moves import gather_index_term
from prover.terms import Const, Term, Var, op

from .graph import Graph, Node, Value


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def apply_layout(x: np.ndarray, n: Node) -> np.ndarray:
    if n.op == "reshape":
        return np.reshape(x, n.attrs["shape"])
    if n.op == "transpose":
        return np.transpose(x, n.attrs["perm"])
    return x


def first_moved(src_shape: tuple[int, ...], ops: list[Node]):
    """(output index, source index) of the first element a layout chain moves, or None."""
    idx = np.arange(int(np.prod(src_shape)), dtype=np.int64).reshape(src_shape)
    for n in ops:
        idx = apply_layout(idx, n)
    flat = idx.reshape(-1)
    bad = np.nonzero(flat != np.arange(flat.size))[0]
    if bad.size == 0:
        return None
    p = int(bad[0])
    out_idx = tuple(int(v) for v in np.unravel_index(p, idx.shape))
    src_idx = tuple(int(v) for v in np.unravel_index(int(flat[p]), src_shape))
    return out_idx, src_idx


def strip_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def _coords(flat: Term, shape: tuple[int, ...]) -> list[Term]:
    return [
        op("mod_const", op("floordiv_const", flat, c=s), c=d)
        for s, d in zip(_strides(shape), shape, strict=True)
    ]


def _flat(coords: list[Term], shape: tuple[int, ...]) -> Term:
    terms = [op("mul_const", c, c=s) for c, s in zip(coords, _strides(shape), strict=True)]
    acc = terms[0]
    for t in terms[1:]:
        acc = op("add", acc, t)
    return acc


def index_map_terms(
    g: Graph, src_shape: tuple[int, ...], ops: list[Node]
) -> tuple[tuple[Term, ...], tuple[Term, ...], int]:
    """(before, after, size): source coordinates of output element `f`, via the chain vs the fused store."""
    shapes = [src_shape]
    for n in ops:
        shapes.append(g.values[n.output].shape)
    f = Var("f")
    coords = _coords(f, shapes[-1])
    for n, in_shape in zip(reversed(ops), reversed(shapes[:-1]), strict=True):
        out_shape = g.values[n.output].shape
        if n.op == "reshape":
            coords = _coords(_flat(coords, out_shape), in_shape)
        elif n.op == "transpose":
            inv = dict(zip(n.attrs["perm"], coords, strict=True))  # input axis -> coordinate
            coords = [inv[k] for k in range(len(coords))]
        elif n.op == "slice":
            coords = [
                op("add", op("mul_const", c, c=int(k)), Const(int(s)))
                for c, s, k in zip(coords, n.attrs["starts"], n.attrs["steps"], strict=True)
            ]
    before = tuple(coords)
    out_shape = shapes[-1]
    r = len(strip_leading_ones(src_shape))
    out_coords = _coords(f, out_shape)
    after = tuple([Const(0)] * (len(src_shape) - r) + out_coords[len(out_shape) - r :])
    return before, after, int(np.prod(out_shape))


def transpose_chain_terms(
    src_shape: tuple[int, ...], perms: list[tuple[int, ...]]
) -> tuple[tuple[Term, ...], tuple[Term, ...], int]:
    """(before, after, size) of reading a value through the transposes `perms` in turn
    instead of reading the source itself: the source coordinates of output element `f`
    via the chain vs those of `f` in the source (equal iff the chain is the identity)."""
    g = Graph({}, [], [], [])
    ops, shape, prev = [], tuple(src_shape), "src"
    for k, p in enumerate(perms):
        shape = tuple(shape[i] for i in p)
        name = f"t{k}"
        g.values[name] = Value(name, "int8", shape)
        ops.append(Node(name, "transpose", [prev], [name], {"perm": tuple(p)}))
        prev = name
    before, _, size = index_map_terms(g, tuple(src_shape), ops)
    return before, tuple(_coords(Var("f"), tuple(src_shape))), size


def move_terms(
    src_shape: tuple[int, ...],
    node: Node,
    out_shape: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
) -> tuple[tuple[Term, ...], tuple[Term, ...], int]:
    """(before, after, size) of a layout node (`reshape`, `transpose`, `slice`, `identity`) against
    the NPU's strided gather (`npu_backend.moves`): the source coordinates of output element
    `f` by the node's meaning vs those of the flat element the gather reads."""
    g = Graph({"out": Value("out", "int8", tuple(out_shape))}, [], [], [])
    ops = [] if node.op == "identity" else [Node("out", node.op, ["src"], ["out"], node.attrs)]
    if ops:
        before, _, size = index_map_terms(g, tuple(src_shape), ops)
    else:
        before, size = tuple(_coords(Var("f"), tuple(src_shape))), int(np.prod(src_shape))
    flat = gather_index_term(tuple(out_shape), tuple(strides), int(offset))
    return before, tuple(_coords(flat, tuple(src_shape))), size
