"""QLinearMatMul whose two operands are both activations (attention's scores Q.K^T and
context P.V): one IR `matmul_act` node, an exact batched int32 product of run-time operands
with its float32 requantization (`requant`, as for constant weights).

Its accumulator range is over every value of both types (K products, each extremal at a
corner of the two types' ranges; attained, the operands being free). Per-tensor scales and
zero points only (QLinearMatMul's per-column b parameters need a constant 2-D b); the
operands' leading (batch) dims must be equal, or b 2-D. Any other form stays on the host.
"""

from __future__ import annotations

import onnx

from compiler.ir.graph import Value
from prover.inttypes import int_type
from prover.matmul import AccRange

from ..context import BuildContext
from ..elem_types import EIGHT_BIT
from .integer_matmul import out_type, requant_scales


def act_acc_range(a_type: str, b_type: str, a_zp: int, b_zp: int, k: int) -> tuple[int, int]:
    """The exact accumulator range of K products (a - a_zp)(b - b_zp) over both types."""
    at, bt = int_type(a_type), int_type(b_type)
    corners = [(x - a_zp) * (y - b_zp) for x in (at.min, at.max) for y in (bt.min, bt.max)]
    return k * min(corners), k * max(corners)


def qlinear_matmul_act(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """QLinearMatMul(a, ..., b, ...) with b computed at run time: `matmul_act`."""
    at = ctx.expect_dtype(n, n.input[0], EIGHT_BIT)
    bt = ctx.expect_dtype(n, n.input[3], EIGHT_BIT)
    a, b = ctx.value(n, n.input[0]), ctx.value(n, n.input[3])
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != b.shape[-2]:
        raise ctx.fail(n, f"shapes {list(a.shape)} and {list(b.shape)} do not multiply")
    if len(b.shape) > 2 and a.shape[:-2] != b.shape[:-2]:
        raise ctx.fail(
            n, f"b's leading dims {list(b.shape[:-2])} broadcast against a's {list(a.shape[:-2])}"
        )
    ctx.float32_scales(n, {1: "a_scale", 4: "b_scale", 6: "y_scale"})
    a_scale, b_scale, y_scale = (
        ctx.scalar(n, i, w) for i, w in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale"))
    )
    a_zp = int(ctx.scalar(n, 2, "a_zero_point"))
    b_zp = int(ctx.scalar(n, 5, "b_zero_point"))
    y_zp_arr = ctx.const(n, 7, "y_zero_point")
    if y_zp_arr.size != 1:
        raise ctx.fail(n, "y_zero_point must be a scalar")
    out_t = out_type(ctx, n, y_zp_arr)
    (scale,) = requant_scales(ctx, n, a_scale, (b_scale,), y_scale)
    k, cols = a.shape[-1], b.shape[-1]
    lo, hi = act_acc_range(at, bt, a_zp, b_zp, k)
    r = AccRange((lo,) * cols, (hi,) * cols)
    if not r.fits():
        raise ctx.fail(n, f"accumulator range {[lo, hi]} may leave int32 (ONNX Runtime would wrap)")
    shape = a.shape[:-1] + (cols,)
    y_zp = int(y_zp_arr.reshape(()).item())
    ctx.emit(
        "matmul_act",
        [n],
        [a.name, b.name],
        Value(n.output[0], out_t, shape),
        a_zp=a_zp,
        w_zp=b_zp,
        a_type=at,
        w_type=bt,
        acc_range=r,
        requant={"scheme": "float", "scale": scale, "zp": y_zp, "out": out_t},
    )
