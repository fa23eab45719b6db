"""The one builder of the NPU step a matmul node (or a site about to be fused) lowers to.

Legality validates the step a site would become (`compiler.ir.structure.fused_step`, in
the structure it is validated in) and lowering emits the step of the fused node: both
come from `place_matmul`, so what the backend's validation accepted is exactly what is
emitted. A helper, not a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.ir.graph import Graph, Node, Value
from npu_backend.lowered import NpuMatMul


def compute_kind(n: Node) -> str:
    """The target compute unit of a compute node: a `matmul`/`fused` node's `kind`, a host
    QDQ group's `compute` op (a Gemm/QGemm runs on the MatMul unit)."""
    k = n.attrs.get("kind") or n.attrs.get("compute") or "MatMul"
    return "MatMul" if k == "Gemm" else k


@dataclass(frozen=True)
class MatMulPlacement:
    """An NpuMatMul and the layout around it: the NPU reads the reduced axis last and
    writes [..., N], so a pointwise conv (NCHW) reads `nat_in` (NHWC) and writes `out`
    (natural) where the IR's values are `x` and `y`."""

    step: NpuMatMul
    x: Value
    nat_in: Value
    y: Value
    out: Value
    channels_first: bool
    w_shape: tuple[int, ...]

    def buffers(self) -> tuple[Value, ...]:
        """The step's tensors not in the IR (for the memory check): input, output, weights, bias."""
        a = self.step
        return (
            self.nat_in,
            self.out,
            Value(a.w, a.w_type, self.w_shape),
            *([Value(a.bias, "int32", (self.w_shape[1],))] if a.bias is not None else []),
        )


def place_matmul(
    g: Graph,
    n: Node,
    post: Any,
    structure: str,
    y_name: str | None = None,
    origin: tuple[str, ...] | None = None,
) -> MatMulPlacement:
    """The NpuMatMul of matmul node `n` with epilogue `post` writing IR value `y_name`
    (default the node's output) for ONNX nodes `origin` (default the node's). The int32
    bias, when the node has one, is the constant `<name>.bias`; the weights `<name>.w`."""
    a = n.attrs
    x, y = g.values[n.inputs[0]], g.values[y_name or n.output]
    cf = a.get("layout") == "channels_first"
    nat_in = Value(f"{x.name}.nhwc", x.dtype, x.shape[:1] + x.shape[2:] + x.shape[1:2]) if cf else x
    win = a.get("window")
    if win is None:
        nat_shape = nat_in.shape[:-1] + (a["w"].shape[1],)
    elif cf:  # a conv over a window: [N, *out_spatial, C_out], channels last (from the
        # conv's own input and window: `y` may be a fused chain's reshaped result)
        spatial = tuple(win.out_spatial(tuple(int(d) for d in x.shape[2:])))
        nat_shape = (x.shape[0], *spatial, int(np.asarray(a["w"]).shape[1]))
    else:  # a channels-last op over a window (an NHWC pool) writes its own shape
        nat_shape = y.shape
    # channels-first: the NPU writes NHWC, which can have y's NCHW shape (C = H = W) and
    # still hold other elements at each index; it always gets its own buffer and a transpose
    same = nat_shape == y.shape and not (cf and _moves_elements(nat_shape))
    out = y if same else Value(f"{y.name}.natural", y.dtype, nat_shape)
    step = NpuMatMul(
        name=n.name,
        a=nat_in.name,
        w=f"{n.name}.w",
        out=out.name,
        a_zp=int(a["a_zp"]),
        w_zp=a["w_zp"],
        bias=None if a.get("bias") is None else f"{n.name}.bias",
        a_type=a["a_type"],
        w_type=a.get("w_type", "int8"),
        post=post,
        structure=structure,
        onnx_nodes=tuple(n.origin if origin is None else origin),
        compute=compute_kind(n),
        window=win,
        a_zp_input=a.get("a_zp_input"),
    )
    return MatMulPlacement(step, x, nat_in, y, out, cf, tuple(np.asarray(a["w"]).shape))


def _moves_elements(nhwc: tuple[int, ...]) -> bool:
    """Whether NHWC -> NCHW (or NWC -> NCW) moves elements for this shape (it does not when
    C = 1, or every spatial size is 1: the only non-unit axes keep their order)."""
    c, spatial = nhwc[-1], int(np.prod(nhwc[1:-1], dtype=np.int64))
    return c != 1 and spatial != 1


def validation_issues(step: Any, target: Any) -> list:
    """The backend's objections to `step` on `target` (`npu_backend.validate`)."""
    from npu_backend.validate import validate_step

    return validate_step(step, target)


def weights_array(n: Node) -> np.ndarray:
    """The node's weights in their storage type (the `<name>.w` constant)."""
    return np.asarray(n.attrs["w"]).astype(np.dtype(n.attrs.get("w_type", "int8")))
