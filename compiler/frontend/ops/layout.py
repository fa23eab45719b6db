"""Ops that move or keep values without arithmetic: Reshape, Transpose, Identity, and the
no-ops Cast (to the input's own type) and inference Dropout (all `identity` but the first two).

An Identity of a constant is that constant (no IR node).

Versions read: Reshape 5+ (Reshape-1..4 take the shape as an attribute: not claimed; 14 adds
`allowzero`); Transpose 1+ (`perm`); Identity 1+; Cast 6+ (Cast-1's `to` is a type name;
19 adds `saturate` and 24 `round_mode`, which only float8 targets read, never taken here);
Dropout 7+ (1..6 have `is_test`; 12 moves training mode to input 2).
"""

from __future__ import annotations

import numpy as np
import onnx

from compiler.ir.graph import Value

from ..context import BuildContext
from ..elem_types import DTYPES, type_name
from ..f16_context import fold_cast
from ..registry import converter


@converter("", "Reshape", since=5, attributes=("allowzero",))
def reshape(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Reshape to a constant shape, or one ORT's constant folding computes from static
    shapes (0 copies a dim unless `allowzero`; one -1 is inferred); a shape only the run
    decides keeps the Reshape on the host (`BuildContext.const`). A Reshape of a constant
    is that constant reshaped (ORT's constant folding: a bias reshaped for a Conv's Add)."""
    allowzero = bool(ctx.attrs(n).get("allowzero", 0))
    if n.input[0] in ctx.consts and n.output[0] not in ctx.graph_outputs:
        c = ctx.consts[n.input[0]]
        spec = [int(v) for v in ctx.folded(n, 1, "shape").reshape(-1)]
        dims = [c.shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(spec)]
        try:
            ctx.consts[n.output[0]] = c.reshape(dims)
        except ValueError:
            raise ctx.bad(n, f"cannot reshape {list(c.shape)} to {spec}") from None
        return
    x = ctx.value(n, n.input[0])
    spec = [int(v) for v in ctx.folded(n, 1, "shape").reshape(-1)]
    dims = [x.shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(spec)]
    total = int(np.prod(x.shape))
    if dims.count(-1) == 1:
        rest = int(np.prod([d for d in dims if d != -1]))
        dims[dims.index(-1)] = total // rest if rest else 0
    if int(np.prod(dims)) != total or any(d < 0 for d in dims):
        raise ctx.fail(n, f"cannot reshape {list(x.shape)} to {spec}")
    ctx.emit("reshape", [n], [x.name], Value(n.output[0], x.dtype, tuple(dims)), shape=tuple(dims))


@converter("", "Transpose", since=1, attributes=("perm",))
def transpose(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Transpose by `perm` (default: reversed axes); of a constant, that constant
    transposed (ORT's constant folding)."""
    perm = ctx.attrs(n).get("perm")
    if n.input[0] in ctx.consts and n.output[0] not in ctx.graph_outputs:
        c = ctx.consts[n.input[0]]
        p = list(range(c.ndim))[::-1] if perm is None else [int(v) for v in perm]
        if sorted(p) != list(range(c.ndim)):
            raise ctx.bad(n, f"perm {p} is not a permutation of {c.ndim} axes")
        ctx.consts[n.output[0]] = np.transpose(c, p)
        return
    x = ctx.value(n, n.input[0])
    if perm is None:
        perm = list(range(len(x.shape)))[::-1]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(x.shape))):
        raise ctx.fail(n, f"perm {perm} is not a permutation of {len(x.shape)} axes")
    shape = tuple(x.shape[p] for p in perm)
    ctx.emit("transpose", [n], [x.name], Value(n.output[0], x.dtype, shape), perm=tuple(perm))


@converter("", "Identity", since=1, attributes=())
def identity(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Identity: `identity`; of a constant, that constant (ORT folds it), so an initializer
    behind an Identity is still a constant weight, bias or scale."""
    ctx.attrs(n)
    if n.input[0] in ctx.consts:
        if n.output[0] in ctx.graph_outputs:
            return ctx.host([n])
        ctx.consts[n.output[0]] = ctx.consts[n.input[0]]
        return
    x = ctx.value(n, n.input[0])
    ctx.emit("identity", [n], [x.name], Value(n.output[0], x.dtype, x.shape))


@converter("", "Cast", since=6)
def cast(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Cast to the input's own type is a no-op (`identity`); any other Cast is hosted.

    A Cast of a constant (ORT's InsertedPrecisionFreeCast_* on a float16 scale, in the
    graph the integer QDQ reading reads) is folded exactly as ORT casts.
    """
    to = next((int(a.i) for a in n.attribute if a.name == "to"), None)
    if n.input and n.input[0] in ctx.consts and to is not None:
        folded = fold_cast(ctx.consts[n.input[0]], to)
        if folded is None:
            raise ctx.fail(n, f"a Cast of constant '{n.input[0]}' to {type_name(to)} is not folded")
        ctx.consts[n.output[0]] = folded
        return
    x = ctx.value(n, n.input[0])
    if to is not None and DTYPES.get(to) == x.dtype:
        ctx.emit("identity", [n], [x.name], Value(n.output[0], x.dtype, x.shape))
        return
    target = "?" if to is None else DTYPES.get(to) or type_name(to)
    ctx.unsupported(n, f"a Cast from {x.dtype} to {target} changes the type")


@converter("", "Dropout", since=7)
def dropout(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Dropout in inference (no training_mode, or a constant false; mask unused) is a no-op."""
    x = ctx.value(n, n.input[0])
    mode = ctx.consts.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    training = len(n.input) > 2 and n.input[2] and (mode is None or bool(np.any(mode)))
    mask_used = (
        len(n.output) > 1
        and n.output[1]
        and (ctx.onnx_users.get(n.output[1]) or n.output[1] in ctx.graph_outputs)
    )
    if training or mask_used:
        ctx.unsupported(n, "a Dropout in training mode or with its mask used")
        return
    ctx.emit("identity", [n], [x.name], Value(n.output[0], x.dtype, x.shape))
