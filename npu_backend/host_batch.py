"""A host ONNX step's model opened up for a batch of rows.

A dynamic-batch program holds one row, so its host steps' models declare one-row shapes.
ONNX Runtime runs the user's model on the whole batch at once, and its float kernels
(MatMul with a run-time B, for one) can round differently for one row than for many, so
a batched run must run each host step on all rows in one call too. A step of the model's
own nodes keeps their constants (the frontend folds no batch-dependent one into them), so
only the declared shapes change: every dimension of the row inputs and all output shapes
are left unspecified. The layout steps lowering builds (`compiler.passes.lower`: Reshape
to the value's one-row shape, Transpose, Identity) hold one-row constants; they only
move data, so running them row by row is exactly what ORT computes on the batch.
"""

from __future__ import annotations

from functools import lru_cache

MOVES_DATA = frozenset({"Reshape", "Transpose", "Identity"})


@lru_cache(maxsize=64)
def widened(model: bytes, row_inputs: frozenset[str]) -> bytes:
    """`model` (serialized) with the shapes of `row_inputs` and of every output unspecified."""
    import onnx  # lazy: only batched runs with host ONNX steps need it

    m = onnx.ModelProto.FromString(model)
    for vi in m.graph.input:
        if vi.name in row_inputs:
            for d in vi.type.tensor_type.shape.dim:
                d.Clear()
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return m.SerializeToString()


@lru_cache(maxsize=256)
def moves_data_only(model: bytes) -> bool:
    """Whether every node of `model` (serialized) only moves data (`MOVES_DATA`)."""
    import onnx

    nodes = onnx.ModelProto.FromString(model).graph.node
    return all(n.op_type in MOVES_DATA and n.domain in ("", "ai.onnx") for n in nodes)
