"""QDQ groups read the integer way: the graph ONNX Runtime's own QDQ transformers produce.

At its default optimisation level ORT rewrites DequantizeLinear -> op -> QuantizeLinear
groups into integer kernels before running them: DQ -> MatMul -> Q becomes QLinearMatMul,
DQ -> Gemm (int32 bias DQ) -> Q becomes com.microsoft QGemm, DQ -> Add -> Q QLinearAdd,
DQ -> Sigmoid -> Q QLinearSigmoid, and on x86-64 builds (`QDQIsInt8Allowed()` is false
there at compile time) int8 activations are first moved to uint8 with the zero point
plus 128, after which some groups (an int8 QLinearAdd) are left as float ops. Which
groups it rewrites is ORT's decision, so rather than re-deriving its selector rules this
module asks ORT for the rewritten graph (`ORT_ENABLE_EXTENDED`, where the QDQ transformers
run; measured identical to the default `ORT_ENABLE_ALL` on the 8 digits QDQ models) and
the frontend reads that QOperator graph with its usual, exact handlers. Node names are
ORT's: the rewritten op keeps the name of the group's compute node (e.g. "MatMul").

The rewrite depends only on the ORT build's architecture (x86-64 here; ARM64 keeps int8,
which is numerically the same shift by 128), not on the CPU features of the machine.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from .errors import FrontendError

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def has_qdq_groups(m: onnx.ModelProto) -> bool:
    """Whether some DequantizeLinear reads a non-constant (an activation of a QDQ group)."""
    consts = {i.name for i in m.graph.initializer}
    return any(
        n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx") and n.input[0] not in consts
        for n in m.graph.node
    )


def integer_kernels(m: onnx.ModelProto) -> int:
    """How many integer kernels (QLinear*, QGemm) a graph has."""
    return sum(1 for n in m.graph.node if n.op_type.startswith("QLinear") or n.op_type == "QGemm")


def integer_reading(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model as the integer QDQ reading sees it (see the module docstring).

    When ORT's rewrite turns no QDQ group into an integer kernel, the groups stay as
    written: ORT then runs the same float ops at every level (a float16 group only gets
    precision-free Casts around the float op, which would hide the group), and the
    frontend reads them as before; so it does for a model ORT cannot load.
    """
    if not has_qdq_groups(m):
        return m
    try:
        r = ort_integer_model(m)
    except FrontendError:
        return m  # ORT cannot run it at all: the frontend names what it cannot read
    return r if integer_kernels(r) > integer_kernels(m) else m


def ort_integer_model(m: onnx.ModelProto) -> onnx.ModelProto:
    """`m` after ONNX Runtime's QDQ transformers (its default-level integer kernels).

    Opset imports the rewritten graph does not use are dropped. Raises `FrontendError`
    when ONNX Runtime cannot load the model.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "ort_integer.onnx"
        so.optimized_model_filepath = str(out)
        try:
            ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - ORT's own message, on one line
            msg = " ".join(str(e).split())[:300]
            raise FrontendError(
                f"ONNX Runtime cannot load the model to read its QDQ groups: {msg}"
            ) from None
        r = onnx.load(str(out))
    used = {n.domain or "" for n in r.graph.node} | {""}
    keep = [o for o in r.opset_import if (o.domain or "") in used]
    del r.opset_import[:]
    r.opset_import.extend(keep)
    return r
