"""Float ops ONNX Runtime runs on the host as written (their attributes are its to read):
MatMul, Gemm, Sigmoid, Tanh, Relu, Add, Sub, Mul (and Clip 6..10, `.elementwise`). On
integer inputs they have no NPU form either and run on the host as `unsupported_op`.

The host fallback itself (a `host_onnx` node, with a `placement` reason when the NPU could
not take the op) is `BuildContext.host` / `BuildContext.unsupported`.

Versions read: any (1+): the frontend interprets nothing of these ops but their input types.
Sigmoid, Tanh and Relu have no attribute at any version the QDQ groups read (10+); as group
members their (empty) attribute sets are checked.
"""

from __future__ import annotations

import onnx

from compiler.ort.tables import QDQ_FUNCTIONS

from ..context import BuildContext
from ..registry import converter

HOST_FLOAT_OPS = ("MatMul", "Gemm", "Sigmoid", "Tanh", "Relu", "Add", "Sub", "Mul")


def float_op(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """A float op ONNX Runtime runs as written; on other types it has no NPU form either."""
    for i in n.input:
        if i and i not in ctx.consts and ctx.dtype_of(n, i) != "float32":
            t = ctx.dtype_of(n, i)
            return ctx.unsupported(n, f"{n.op_type} on {t} (input '{i}') has no NPU form")
    ctx.host([n])


for _op in HOST_FLOAT_OPS:
    converter("", _op, since=1, attributes=() if _op in QDQ_FUNCTIONS else None)(float_op)
