"""Float compute on the host: the compute ops of a model that nobody quantized.

A float model (or a part of one the quantizer skipped) has no integer compute to put on the
NPU, so it gets no candidate and no verdict, and a check of it would pass silently. This
names those ops, so the report can say so loudly (`float_compute`) and a gate can refuse it.
"""

from __future__ import annotations

from typing import Any

import onnx

from prover.verdict import ReasonCode

from .graph import Graph

# ONNX (and ONNX Runtime) ops that do the multiply-accumulate work of a network
COMPUTE_OPS = frozenset(
    {
        "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "FusedMatMul", "FusedGemm",
        "FusedConv", "MatMulNBits", "LSTM", "GRU", "RNN", "Attention", "MultiHeadAttention",
    }
)  # fmt: skip
INTEGER_COMPUTE = frozenset({"matmul", "fused"})


def float_compute_ops(g: Graph) -> list[tuple[str, str]]:
    """(ONNX node name, op type) of every compute op the host runs in float, in order."""
    out = []
    for n in g.nodes:
        if n.op != "host_onnx":
            continue
        for blob in n.attrs.get("nodes", ()):
            p = onnx.NodeProto.FromString(blob)
            if p.op_type in COMPUTE_OPS:
                out.append((p.name or p.output[0], p.op_type))
    return out


def integer_compute_ops(g: Graph) -> int:
    """How many integer compute ops (matmuls and convolutions, fused or not) `g` has."""
    return sum(1 for n in g.nodes if n.op in INTEGER_COMPUTE)


def float_compute_finding(g: Graph) -> dict[str, Any] | None:
    """The `float_compute` finding of a model's IR, or None when every compute op is
    integer (or there is none at all)."""
    ops = float_compute_ops(g)
    if not ops:
        return None
    shown = ", ".join(f"{op} '{name}'" for name, op in ops[:3])
    more = f" and {len(ops) - 3} more" if len(ops) > 3 else ""
    which = (
        "the model is not quantized"
        if integer_compute_ops(g) == 0
        else "part of the model is not quantized"
    )
    n = len(ops)
    return {
        "code": ReasonCode.FLOAT_COMPUTE.value,
        "nodes": [name for name, _ in ops],
        "message": (
            f"{which}: {n} compute op{'s' if n != 1 else ''} run{'' if n != 1 else 's'} in "
            f"float on the host ({shown}{more}); quantize it first "
            "(onnxruntime.quantization.quantize_static) and check the quantized model"
        ),
        "float_ops": [{"node": name, "op": op} for name, op in ops],
    }
