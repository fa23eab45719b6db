"""Ops that move or keep values without arithmetic: Reshape, Transpose, Identity, and the
no-ops Cast (to the input's own type) and inference Dropout (all `identity` but the first two).

An Identity of a constant is that constant (no IR node).

Versions read: Reshape 5+ (Reshape-1..4 take the shape as an attribute: not claimed; 14 adds
`allowzero`); Transpose 1+ (`perm`); Identity 1+; Cast 6+ (Cast-1's `to` is a type name;
19 adds `saturate` and 24 `round_mode`, which only float8 targets read, never taken here);
Dropout 7+ (1..6 have `is_test`; 12 moves training mode to input 2); Flatten 1+ (`axis`;
negative from 11), Squeeze and Unsqueeze 1+ (`axes` an attribute up to 12, an input from
13; negative from 11): each a `reshape` (row-major order kept); Slice 1+ (starts, ends and
axes attributes up to 9; inputs with steps from 10, constant or known before the run as
ORT's folding computes them, else the host): a `slice` with ONNX's clamping, a start and a
step per axis (an empty result: the host).
"""

from __future__ import annotations

import numpy as np
import onnx

from compiler.ir.graph import Value

from ..context import BuildContext
from ..elem_types import DTYPES, type_name
from ..f16_context import fold_cast
from ..registry import converter, opset_version


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


def _version(ctx: BuildContext, n: onnx.NodeProto) -> int:
    return opset_version(ctx.opsets, n.domain)


def _reshape_to(ctx: BuildContext, n: onnx.NodeProto, x: Value, dims: list[int]) -> None:
    if int(np.prod(dims)) != int(np.prod(x.shape)):
        raise ctx.fail(n, f"cannot reshape {list(x.shape)} to {dims}")
    ctx.emit("reshape", [n], [x.name], Value(n.output[0], x.dtype, tuple(dims)), shape=tuple(dims))


def _axis(ctx: BuildContext, n: onnx.NodeProto, a: int, rank: int, negative: bool) -> int:
    """Axis `a` of a rank-`rank` tensor (negative ones counted from the end, where allowed)."""
    if not (-rank if negative else 0) <= a < rank:
        raise ctx.bad(n, f"axis {a} is outside a rank-{rank} tensor")
    return a % rank


@converter("", "Flatten", since=1, attributes=("axis",))
def flatten(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Flatten at `axis` (default 1): [prod(dims[:axis]), prod(dims[axis:])], a `reshape`."""
    x = ctx.value(n, n.input[0])
    r = len(x.shape)
    a = int(ctx.attrs(n).get("axis", 1))
    a = r if a == r else _axis(ctx, n, a, r, _version(ctx, n) >= 11)
    dims = [int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:]))]
    _reshape_to(ctx, n, x, dims)


def _axes(ctx: BuildContext, n: onnx.NodeProto) -> list[int] | None:
    """Squeeze/Unsqueeze axes: the attribute up to opset 12, the constant input 1 from 13."""
    if _version(ctx, n) < 13:
        v = ctx.attrs(n).get("axes")
        return None if v is None else [int(a) for a in v]
    ctx.attrs(n)
    c = ctx.const(n, 1, "axes", optional=True)
    return None if c is None else [int(a) for a in c.reshape(-1)]


@converter("", "Squeeze", since=1, attributes=("axes",))
def squeeze(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Squeeze `axes` (each of size 1; none: every unit axis), a `reshape`."""
    x = ctx.value(n, n.input[0])
    r = len(x.shape)
    axes = _axes(ctx, n)
    neg = _version(ctx, n) >= 11
    drop = (
        {i for i, d in enumerate(x.shape) if d == 1}
        if axes is None
        else {_axis(ctx, n, a, r, neg) for a in axes}
    )
    if any(x.shape[i] != 1 for i in drop):
        raise ctx.bad(n, f"squeezes an axis of {list(x.shape)} whose size is not 1")
    _reshape_to(ctx, n, x, [d for i, d in enumerate(x.shape) if i not in drop])


@converter("", "Unsqueeze", since=1, attributes=("axes",))
def unsqueeze(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Unsqueeze: unit axes inserted at `axes` of the output, a `reshape`."""
    x = ctx.value(n, n.input[0])
    axes = _axes(ctx, n)
    if axes is None:
        raise ctx.bad(n, "Unsqueeze needs axes")
    r = len(x.shape) + len(axes)
    at = {_axis(ctx, n, a, r, _version(ctx, n) >= 11) for a in axes}
    if len(at) != len(axes):
        raise ctx.bad(n, f"axes {axes} repeat an axis")
    rest = iter(x.shape)
    _reshape_to(ctx, n, x, [1 if i in at else next(rest) for i in range(r)])


def _slice_params(ctx: BuildContext, n: onnx.NodeProto):
    """(starts, ends, axes, steps) of a Slice: attributes up to opset 9, inputs from 10."""
    if _version(ctx, n) < 10:
        a = ctx.attrs(n)
        if "starts" not in a or "ends" not in a:
            raise ctx.bad(n, "starts and ends are required")
        return list(a["starts"]), list(a["ends"]), a.get("axes"), None
    ctx.attrs(n)

    def ints(i: int, what: str) -> list[int] | None:
        name = n.input[i] if i < len(n.input) else ""
        if name and name in ctx.known:  # computed before the run, as ORT's folding does
            return [int(v) for v in np.asarray(ctx.known[name]).reshape(-1)]
        c = ctx.const(n, i, what, optional=i >= 3)
        return None if c is None else [int(v) for v in c.reshape(-1)]

    return ints(1, "starts"), ints(2, "ends"), ints(3, "axes"), ints(4, "steps")


@converter("", "Slice", since=1, attributes=("axes", "ends", "starts"), host_fallback=True)
def slice_(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Slice with constant starts/ends/axes/steps: a `slice` node (a start and a step per
    axis after ONNX's clamping)."""
    x = ctx.value(n, n.input[0])
    r = len(x.shape)
    starts, ends, axes, steps = _slice_params(ctx, n)
    assert starts is not None and ends is not None
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise ctx.bad(n, "starts, ends, axes and steps must have one nonzero entry per axis")
    st, sp, dims = [0] * r, [1] * r, list(x.shape)
    for s0, e0, a, k in zip(starts, ends, axes, steps, strict=True):
        a = _axis(ctx, n, a, r, True)
        d = x.shape[a]
        s0, e0 = (s0 + d if s0 < 0 else s0), (e0 + d if e0 < 0 else e0)
        if k > 0:
            s0, e0 = min(max(s0, 0), d), min(max(e0, 0), d)
        else:
            s0, e0 = min(max(s0, 0), d - 1), min(max(e0, -1), d - 1)
        st[a], sp[a], dims[a] = s0, k, max(0, -(-(e0 - s0) // k))
    if 0 in dims:
        return ctx.unsupported(n, "a Slice with an empty result")
    out = Value(n.output[0], x.dtype, tuple(dims))
    ctx.emit("slice", [n], [x.name], out, starts=tuple(st), steps=tuple(sp))


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
