"""The meaning of each IR op as a kernel term (prover.terms), and its concrete evaluation.

A `host_onnx` node means what ONNX Runtime computes, which the IR does not import: its
evaluator registers itself where it is defined (`compiler.ort.host`, imported by the
frontend that builds host nodes and by the passes), through `register_evaluator`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from compiler.errors import CompilerError, InternalError
from prover.conv import any_pair_saturable, conv_acc
from prover.domain import NUMPY
from prover.matmul import matmul_acc
from prover.pair_saturation import pair_saturating_acc
from prover.pool import max_pool
from prover.qlinear_binary import (
    QLinearBinaryParams,
    SpanMode,
    qlinear_binary_of,
    qlinear_binary_pairs,
    qlinear_binary_table,
)
from prover.reference import Accumulation
from prover.terms import Op, Term, Var, evaluate, op

from .graph import Graph, Node

ELEMENTWISE = ("requantize", "clip", "lut", "identity", "reshape", "transpose")

# node, the graph it is in, the values computed so far -> the node's outputs
Evaluator = Callable[[Node, Graph, Mapping[str, np.ndarray]], list[np.ndarray]]
_EVALUATORS: dict[str, Evaluator] = {}


def register_evaluator(op_name: str, fn: Evaluator) -> None:
    """Give IR op `op_name` its concrete evaluation, defined above the IR (the host's)."""
    _EVALUATORS[op_name] = fn


def requant_scale(rq: Mapping[str, Any], column: int = 0) -> float:
    """The float scale of requantization dict `rq` for output `column` (`scale` holds one
    per column, or one for every column)."""
    scale = rq["scale"]  # np.ndim would copy a per-column tuple: O(columns) per call
    per_column = isinstance(scale, tuple | list) or getattr(scale, "ndim", 0) > 0
    return float(scale[column] if per_column else scale)


def requant_term(x: Term, rq: Mapping[str, Any], column: int = 0) -> Term:
    """A requantization dict (`scheme`, params, `zp`, `out`) as a kernel term."""
    scheme = rq["scheme"]
    if scheme == "float":
        s = requant_scale(rq, column)
        return op("requant_float", x, scale=s, zp=int(rq["zp"]), out=rq["out"])
    prim = {"double": "requant_double", "single": "requant_single"}[scheme]
    return op(
        prim,
        x,
        multiplier=int(rq["multiplier"]),
        shift=int(rq["shift"]),
        zp=int(rq["zp"]),
        out=rq["out"],
    )


def qlinear_binary_params(node: Node) -> QLinearBinaryParams:
    """The `prover.qlinear_binary` parameters of a `qlinear_binary` node."""
    return QLinearBinaryParams(**node.attrs["params"])


def qlinear_binary_column_table(node: Node, column: int) -> tuple[int, ...]:
    """A `qlinear_binary` node's function of its input for one output column (256 entries)."""
    a = node.attrs
    return qlinear_binary_table(
        a["binary"],
        int(a["const"][column]),
        qlinear_binary_params(node),
        x_is_a=bool(a["x_is_a"]),
        mode=SpanMode(a["mode"]),
        fma=bool(a["fma"]),
    )


def node_term(node: Node, x: Term, column: int = 0) -> Term:
    """The per-element meaning of an elementwise IR node applied to `x` (in `column`).

    Only `qlinear_binary` depends on the column (its constant operand is per column).
    """
    a = node.attrs
    if node.op == "qlinear_binary":
        table = qlinear_binary_column_table(node, column)
        return op("lut", x, table=table, in_type=a["params"]["dtype"], index_order="offset")
    if node.op == "requantize":
        return requant_term(x, a)
    if node.op == "clip":
        return op("clip", x, lo=int(a["lo"]), hi=int(a["hi"]))
    if node.op == "lut":
        return _lut_term(x, tuple(a["table"]), a["in_type"])
    if node.op in ("identity", "reshape", "transpose"):
        return x
    raise CompilerError(f"node '{node.name}' ({node.op}) is not elementwise")


def _lut_term(x: Term, table: tuple[int, ...], in_type: str) -> Term:
    """`op("lut", x, table=table, in_type=in_type, index_order="offset")`, with the table
    frozen once per table object: freezing 256 entries per column and per site was most
    of what building epilogues cost (a site's columns read the same node's table)."""
    hit = _FROZEN.get(id(table))
    if hit is None or hit[0] is not table:  # by identity: a plain tuple's hash is not kept
        frozen = op("lut", Var("x"), table=table, in_type=in_type, index_order="offset")
        hit = (table, frozen.kwargs["table"])
        if len(_FROZEN) >= 1024:
            _FROZEN.clear()
        _FROZEN[id(table)] = hit
    params = (("in_type", in_type), ("index_order", "offset"), ("table", hit[1]))
    return Op("lut", (x,), params)


# tables as `prover.terms.op` freezes them (a `prover.terms.Table`), by the identity of the
# table given (kept with its answer, so its id is not reused while the entry lives)
_FROZEN: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}


def is_u8s8(node: Node) -> bool:
    """A matmul of uint8 activations by int8 weights (where ORT's x86 kernels differ)."""
    at = node.attrs
    return at.get("a_type") == "uint8" and at.get("w_type", "int8") == "int8"


def pair_saturates(node: Node, reference: Any) -> bool:
    """Whether `reference` sums this node's products in int16-saturated pairs.

    Only the ONNX op (`matmul`) follows the profile: a `fused` node is the NPU's
    MatMul, which accumulates exactly whatever the reference.
    """
    acc = getattr(reference, "u8s8_accumulation", Accumulation.EXACT)
    return (
        node.op in ("matmul", "matmul_act")
        and is_u8s8(node)
        and acc == Accumulation.PAIR_SATURATING_INT16
    )


def window_of(node: Node) -> Any:
    """The `prover.conv.Window` of a conv node over a window (None: a plain matmul, or a
    pointwise conv over channels)."""
    return node.attrs.get("window")


def matmul_acc_of(node: Node, a: np.ndarray, reference: Any = None, a_zp: Any = None) -> np.ndarray:
    """The int64 accumulator of a `matmul`/`fused` node on input `a` under `reference`.

    `a_zp`: the value of a zero point computed at run time (the node's `a_zp_input`).

    `reference` is a `prover.reference.ReferenceProfile` (None: exact accumulation). A
    conv over a window (`a` channels-last) accumulates exactly; under a pair-saturating
    reference only where no two products can saturate in any order (ONNX Runtime's pair
    order for its im2col kernels is not modelled): elsewhere it has no meaning here.
    """
    at = node.attrs
    w_zp = np.asarray(at["w_zp"], dtype=np.int64)
    if at.get("a_zp_input") is not None and a_zp is None:
        raise CompilerError(f"node '{node.name}': its run-time zero point has no value")
    zp = np.int64(at["a_zp"] if a_zp is None else np.asarray(a_zp).reshape(-1)[0])
    win = window_of(node)
    if win is not None:
        if pair_saturates(node, reference) and any_pair_saturable(at["w"]).any():
            raise CompilerError(
                f"node '{node.name}': uint8 x int8 conv under reference "
                f"{getattr(reference, 'name', reference)}: int16 pair saturation is reachable "
                "and ONNX Runtime's pair order for convolutions is not modelled"
            )
        return conv_acc(a, at["w"], win, zp, w_zp, at["bias"])
    acc_fn = pair_saturating_acc if pair_saturates(node, reference) else matmul_acc
    return acc_fn(np.asarray(a, dtype=np.int64), at["w"], zp, w_zp, at["bias"])


def matmul_act_acc(node: Node, a: np.ndarray, b: np.ndarray, reference: Any = None) -> np.ndarray:
    """The int64 accumulator of a `matmul_act` node (both operands run-time, b [..., K, N]
    batched like a, or 2-D); under a pair-saturating reference a u8s8 one pairs as MLAS."""
    at = node.attrs
    a64, b64 = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if not pair_saturates(node, reference):
        return np.matmul(a64 - at["a_zp"], b64 - at["w_zp"])
    bb = np.broadcast_to(b64, a64.shape[:-2] + b64.shape[-2:])
    out = np.empty(a64.shape[:-1] + (b64.shape[-1],), dtype=np.int64)
    for idx in np.ndindex(*a64.shape[:-2]):
        out[idx] = pair_saturating_acc(a64[idx], bb[idx], at["a_zp"], at["w_zp"], None)
    return out


def requant_groups(rq: Mapping[str, Any], n_cols: int) -> list[tuple[int, ...]]:
    """Columns grouped by identical requantization parameters (per-channel scales), the
    groups in the order of their first column, each in column order."""
    scale = rq.get("scale", 0.0)  # np.ndim would copy a per-column tuple only to count axes
    if not isinstance(scale, tuple | list) and np.ndim(scale) == 0:
        return [tuple(range(n_cols))]
    groups: dict[float, list[int]] = {}
    for j in range(n_cols):
        groups.setdefault(requant_scale(rq, j), []).append(j)
    return [tuple(v) for v in groups.values()]


def eval_term_columns(acc: np.ndarray, groups) -> np.ndarray:
    """Evaluate per-column terms: `groups` is a list of (columns, term over Var('acc'))."""
    out = np.empty_like(acc)
    for cols, term in groups:
        idx = np.asarray(cols, dtype=np.int64)
        out[..., idx] = evaluate(term, NUMPY, {"acc": acc[..., idx]})
    return out


def to_natural(node: Node, x: np.ndarray) -> np.ndarray:
    """The compute input with the reduced (channel) axis last, as the matmul core reads it."""
    return np.moveaxis(x, 1, -1) if node.attrs.get("layout") == "channels_first" else x


def from_natural(node: Node, y: np.ndarray) -> np.ndarray:
    """The compute output back in the op's own layout (NCHW for a pointwise conv)."""
    return np.moveaxis(y, -1, 1) if node.attrs.get("layout") == "channels_first" else y


def eval_node(
    node: Node, graph: Graph, env: Mapping[str, np.ndarray], reference: Any = None
) -> list[np.ndarray]:
    """Concrete evaluation of one IR node (kernel semantics; host nodes via ONNX Runtime).

    `reference`: the `ReferenceProfile` whose u8s8 accumulation a `matmul` follows.
    """
    a = node.attrs
    registered = _EVALUATORS.get(node.op)
    if registered is not None:
        return registered(node, graph, env)
    if node.op == "host_onnx":
        raise InternalError(
            f"node '{node.name}': no evaluator registered for host_onnx "
            "(import compiler.ort.host first)"
        )
    if node.op == "concat":
        return [np.concatenate([np.asarray(env[i]) for i in node.inputs], axis=int(a["axis"]))]
    x = np.asarray(env[node.inputs[0]])
    if node.op in ("matmul", "fused"):
        zp_in = a.get("a_zp_input")
        zp = None if zp_in is None else env[zp_in]
        acc = matmul_acc_of(node, to_natural(node, x), reference, zp)
        rq = a.get("requant")
        if node.op == "fused":
            y = eval_term_columns(acc, a["groups"])
        elif rq is None:
            y = acc
        else:
            groups = requant_groups(rq, acc.shape[-1])
            y = eval_term_columns(
                acc, [(cols, requant_term(Var("acc"), rq, cols[0])) for cols in groups]
            )
        # a fused op stores its natural layout under the output's shape (leading unit dims,
        # a proven index map: row-major order unchanged)
        return [np.reshape(from_natural(node, y), graph.values[node.output].shape)]
    if node.op == "matmul_act":
        acc = matmul_act_acc(node, x, np.asarray(env[node.inputs[1]]), reference)
        y = evaluate(requant_term(Var("acc"), a["requant"], 0), NUMPY, {"acc": acc})
        return [np.asarray(y).reshape(graph.values[node.output].shape)]
    if node.op == "qlinear_binary":
        return [qlinear_binary_eval(node, x, np.asarray(a["const"], dtype=np.int64))]
    if node.op == "eltwise":
        y = eltwise_eval(node, x, np.asarray(env[node.inputs[1]]))
        ref = a.get("post_reference")  # a fused activation: its node's own meaning
        if ref is not None:
            y = np.asarray(evaluate(node_term(ref, Var("x")), NUMPY, {"x": y}))
        return [y]
    if node.op == "max_pool":
        lo = int(np.iinfo(np.dtype(graph.values[node.output].dtype)).min)
        return [from_natural(node, max_pool(to_natural(node, x).astype(np.int64), a["window"], lo))]
    if node.op == "identity":
        return [x]  # any type (a removed Cast/Dropout on a float value too)
    if node.op == "reshape":
        return [np.reshape(x, a["shape"])]
    if node.op == "slice":
        shape = graph.values[node.output].shape
        idx = [s + k * np.arange(d) for s, k, d in zip(a["starts"], a["steps"], shape, strict=True)]
        return [x[np.ix_(*idx)]]
    if node.op == "transpose":
        return [np.transpose(x, a["perm"])]
    if node.op in ELEMENTWISE:
        return [np.asarray(evaluate(node_term(node, Var("x")), NUMPY, {"x": x.astype(np.int64)}))]
    raise CompilerError(f"node '{node.name}': no concrete semantics for op {node.op}")


def eltwise_term(node: Node, a: Term, b: Term) -> Term:
    """An `eltwise` node's element function (ORT's kernel, `prover.eltwise`) of `a` and `b`."""
    at = node.attrs
    return op(
        "qlinear_binary", a, b, binary=at["binary"], mode=at["mode"], fma=bool(at["fma"]),
        **at["params"],
    )  # fmt: skip


def eltwise_eval(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ORT's QLinearAdd/QLinearMul of two activations, numpy-broadcast (exact, int64)."""
    at = node.attrs
    a64, b64 = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(b, np.int64))
    return qlinear_binary_pairs(
        at["binary"], a64, b64, qlinear_binary_params(node), mode=SpanMode(at["mode"]),
        fma=bool(at["fma"]),
    )  # fmt: skip


def qlinear_binary_eval(node: Node, x: np.ndarray, const: np.ndarray) -> np.ndarray:
    """ORT's QLinearAdd/QLinearMul of `x` with the per-column constant (exact, int64)."""
    a = node.attrs
    x64 = np.asarray(x, dtype=np.int64)
    out = np.empty_like(x64)
    params = qlinear_binary_params(node)
    cols = x64.shape[-1] if x64.ndim else 1
    for j in range(cols):
        sl = (..., j) if x64.ndim else ()
        out[sl] = qlinear_binary_of(
            a["binary"],
            x64[sl],
            int(const[j]),
            params,
            x_is_a=bool(a["x_is_a"]),
            mode=SpanMode(a["mode"]),
            fma=bool(a["fma"]),
        )
    return out


def run_graph(
    graph: Graph, inputs: Mapping[str, np.ndarray], keep_all: bool = False, reference: Any = None
) -> dict[str, np.ndarray]:
    """Evaluate the IR on concrete inputs; returns graph outputs (or every value).

    `reference`: the `prover.reference.ReferenceProfile` the ONNX ops follow (None: the
    exact, machine-independent default).
    """
    env: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        if name not in inputs:
            raise CompilerError(f"missing input '{name}'")
        env[name] = np.asarray(inputs[name])
    for n in graph.nodes:
        for o, v in zip(n.outputs, eval_node(n, graph, env, reference), strict=True):
            dt = graph.values[o].dtype
            env[o] = np.asarray(v).astype(np.dtype(dt))
    if keep_all:
        return env
    return {o: env[o] for o in graph.outputs}
