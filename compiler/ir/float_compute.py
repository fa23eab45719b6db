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


def _onnx_ops(n) -> list[onnx.NodeProto]:
    return [onnx.NodeProto.FromString(b) for b in n.attrs.get("nodes", ())]


def float_compute_ops(g: Graph) -> list[tuple[str, str, bool]]:
    """(ONNX node name, op type, whether it computes on dequantized values: a QDQ group
    ORT keeps in float) of every compute op the host runs in float, in order."""
    hosts = [n for n in g.nodes if n.op == "host_onnx"]
    dequantized = {
        o
        for n in hosts
        if any(p.op_type == "DequantizeLinear" for p in _onnx_ops(n))
        for o in n.outputs
    }
    out = []
    for n in hosts:
        members = _onnx_ops(n)
        qdq = bool(n.attrs.get("compute")) or any(i in dequantized for i in n.inputs)
        qdq = qdq or any(p.op_type == "DequantizeLinear" for p in members)
        for p in members:
            if p.op_type in COMPUTE_OPS:
                out.append((p.name or p.output[0], p.op_type, qdq))
    return out


def integer_compute_ops(g: Graph) -> int:
    """How many integer compute ops (matmuls and convolutions, fused or not) `g` has."""
    return sum(1 for n in g.nodes if n.op in INTEGER_COMPUTE)


def _ops(ops: list[tuple[str, str, bool]]) -> str:
    shown = ", ".join(f"{op} '{name}'" for name, op, _ in ops[:3])
    return shown + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def float_compute_finding(g: Graph) -> dict[str, Any] | None:
    """The `float_compute` finding of a model's IR, or None when every compute op is
    integer (or there is none at all)."""
    ops = float_compute_ops(g)
    if not ops:
        return None
    plain = [o for o in ops if not o[2]]
    qdq = [o for o in ops if o[2]]
    parts = []
    if plain:
        which = (
            "the model is not quantized"
            if not integer_compute_ops(g) and not qdq
            else ("part of the model is not quantized")
        )
        parts.append(
            f"{which}: {_count(len(plain), 'compute op')} in float on the host ({_ops(plain)}); "
            "quantize it first (onnxruntime.quantization.quantize_static) and check the "
            "quantized model"
        )
    if qdq:
        parts.append(
            f"ONNX Runtime's default session runs {_count(len(qdq), 'quantized (QDQ) compute op')}"
            f" in float ({_ops(qdq)}): it makes no integer kernel of these groups on this build "
            "(e.g. int8 activations on x86, or weights left in float); quantize activations as "
            "uint8 and weights as int8 (quantize_static's defaults) to get integer kernels"
        )
    return {
        "code": ReasonCode.FLOAT_COMPUTE.value,
        "nodes": [name for name, _, _ in ops],
        "message": "; ".join(parts),
        "float_ops": [{"node": name, "op": op, "qdq": q} for name, op, q in ops],
    }
