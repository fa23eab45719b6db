"""The project domain `ai.npufusion`: `Requantize(x)` with attributes `multiplier`, `shift`,
`zero_point`, `rounding` ("double" | "single" | "float", the last with `scale`) and
`output_type` ("int8", "uint8", "int16", ...). ONNX Runtime cannot run this domain: a form
this converter rejects is an error, never a host op.

Versions read: ai.npufusion 1 (its only version).
"""

from __future__ import annotations

import numpy as np
import onnx

from compiler.ir.graph import Value
from prover.domain import KernelError
from prover.inttypes import TYPES, int_type
from prover.requant import check_multiplier

from ..context import BuildContext
from ..f16_context import PROJECT_DOMAIN
from ..registry import converter


@converter(
    PROJECT_DOMAIN,
    "Requantize",
    since=1,
    attributes=("multiplier", "shift", "zero_point", "rounding", "output_type", "scale"),
)
def requantize(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """ai.npufusion Requantize: `requantize` with a fixed-point (double/single) or float scheme."""
    attrs = ctx.attrs(n)
    x = ctx.value(n, n.input[0])
    if x.dtype not in TYPES or x.dtype == "int64":
        raise ctx.fail(n, f"input has type {x.dtype}; Requantize takes int8/uint8/int16/int32")
    out_t = attrs.get("output_type", b"int8")
    out_t = out_t.decode() if isinstance(out_t, bytes) else str(out_t)
    rounding = attrs.get("rounding", b"double")
    rounding = rounding.decode() if isinstance(rounding, bytes) else str(rounding)
    if out_t not in TYPES or int_type(out_t).bits > 16:
        raise ctx.fail(n, f"output_type {out_t!r} not supported; use int8, uint8, int16 or uint16")
    zp = int(attrs.get("zero_point", 0))
    if not int_type(out_t).contains(zp):
        raise ctx.fail(n, f"zero_point {zp} outside {out_t}")
    if rounding in ("double", "single"):
        for req in ("multiplier", "shift"):
            if req not in attrs:
                raise ctx.fail(n, f"missing attribute '{req}'")
        m, s = int(attrs["multiplier"]), int(attrs["shift"])
        try:
            check_multiplier(m, s, single_rounding=rounding == "single")
        except KernelError as e:
            raise ctx.fail(n, str(e)) from None
        params = {"scheme": rounding, "multiplier": m, "shift": s}
    elif rounding == "float":
        if "scale" not in attrs or not float(attrs["scale"]) > 0:
            raise ctx.fail(n, "rounding 'float' needs a positive attribute 'scale'")
        params = {"scheme": "float", "scale": float(np.float32(attrs["scale"]))}
    else:
        raise ctx.fail(n, f"rounding {rounding!r} unknown; use double, single or float")
    out = Value(n.output[0], out_t, x.shape)
    ctx.emit("requantize", [n], [x.name], out, zp=zp, out=out_t, **params)
