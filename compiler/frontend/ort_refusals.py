"""Models the ONNX checker accepts but ONNX Runtime refuses, found before anything runs.

Such a model has no reference meaning: ORT cannot load it, or its kernel stops with an
error on every input. Without these checks a fused site of it was "proven" (nothing runs
ORT on a fused node) and a hosted one failed later, inside `npuc compile` or a
counterexample replay, as an internal error. The rules are ORT 1.32's CPU kernels'
(measured, tests/test_cli_invalid_models.py):

- two nodes of one graph with the same non-empty name: the session refuses the model;
- a com.microsoft op the frontend reads (QGemm, QLinearAdd/Mul, QLinearSigmoid/LeakyRelu)
  without one of its required inputs (`REQUIRED_INPUTS`, ORT's contrib schemas; the ONNX
  checker does not know them): the session refuses the model;
- the quantization parameters of QLinearMatMul, MatMulInteger, QLinearConv and
  com.microsoft QGemm: the per-tensor ones (scales and zero points of a and y) must be a
  scalar or [1]; those of the weights may instead hold one value per output column, in
  the shape each kernel accepts (`_per_column_shapes`).
"""

from __future__ import annotations

import onnx

from compiler.errors import node_label

Shape = tuple[int, ...]

# per op (domain, op_type): input names by index (ONNX's), the weights' index, the
# per-column parameters' indices and the per-tensor ones
_QUANT_OPS: dict[tuple[str, str], tuple[tuple[str, ...], int, tuple[int, ...], tuple[int, ...]]] = {
    ("", "QLinearMatMul"): (
        ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"),
        3, (4, 5), (1, 2, 6, 7),
    ),
    ("", "MatMulInteger"): (("A", "B", "a_zero_point", "b_zero_point"), 1, (3,), (2,)),
    ("", "QLinearConv"): (
        ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point"),
        3, (4, 5), (1, 2, 6, 7),
    ),
    ("com.microsoft", "QGemm"): (
        ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C", "y_scale",
         "y_zero_point"),
        3, (4, 5), (1, 2, 7, 8),
    ),
}  # fmt: skip


# ONNX Runtime's contrib schemas (`FormalParameterOption.Single`): the indices of the
# inputs a node must name (tests/test_cli_invalid_models.py compares with ORT's schemas)
REQUIRED_INPUTS: dict[str, tuple[int, ...]] = {
    "QGemm": (0, 1, 2, 3, 4, 5),
    "QLinearAdd": (0, 1, 3, 4, 6),
    "QLinearMul": (0, 1, 3, 4, 6),
    "QLinearSigmoid": (0, 1, 3),
    "QLinearLeakyRelu": (0, 1, 3),
}


def missing_required_input(node: onnx.NodeProto) -> str | None:
    """Why ORT refuses com.microsoft `node` for a required input it does not name, or None."""
    if node.domain != "com.microsoft":
        return None
    for i in REQUIRED_INPUTS.get(node.op_type, ()):
        if i >= len(node.input) or not node.input[i]:
            label = node_label(node.name or (node.output[0] if node.output else ""), node.op_type)
            return f"{label}: input {i} is required (ONNX Runtime's schema) but not given"
    return None


def duplicate_node_name(g: onnx.GraphProto) -> str | None:
    """The first node name that two nodes of `g` (or of one of its subgraphs) share, or None.

    Empty names may repeat (ORT names those nodes itself)."""
    seen: set[str] = set()
    for node in g.node:
        if node.name and node.name in seen:
            return node.name
        seen.add(node.name)
        for a in node.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                dup = duplicate_node_name(sub)
                if dup is not None:
                    return dup
    return None


def static_shapes(g: onnx.GraphProto) -> dict[str, Shape]:
    """The fully known shapes of `g`'s values (initializers, inputs, outputs, value_info of
    a shape-inferred graph); a value with a symbolic or unknown dimension is left out."""
    out: dict[str, Shape] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    for init in g.initializer:
        out[init.name] = tuple(int(d) for d in init.dims)
    return out


def _per_column_shapes(op: str, w: Shape, attrs: dict[str, int]) -> tuple[list[Shape], str]:
    """The shapes besides a scalar and [1] that ORT's `op` accepts for a weight scale or
    zero point, given the weights' shape `w`, and how a message names them."""
    if op in ("QLinearMatMul", "MatMulInteger"):  # ORT's IsBQuantParamSupported
        batched = w[:-2] + (1, w[-1])
        shapes = [(w[-1],), batched] if len(w) == 2 else [batched]
        listed = " or ".join(str(list(s)) for s in shapes)
        return shapes, f"{listed} (one value per column of b {list(w)})"
    if op == "QLinearConv":  # IsValidQuantParam(W_scale, M)
        return [(w[0],)], f"[{w[0]}] (one value per output channel)"
    n = w[0] if attrs.get("transB", 0) else w[-1]  # QGemm's CheckInputs
    return [(n,)], f"[{n}] (one value per output column)"


def quant_param_refusal(node: onnx.NodeProto, shapes: dict[str, Shape]) -> str | None:
    """Why ORT's kernel refuses `node`'s quantization parameter shapes, or None (also when
    `node` is no such op or a shape is not statically known)."""
    spec = _QUANT_OPS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
    if spec is None:
        return None
    names, w_idx, per_column, per_tensor = spec
    label = node_label(node.name or (node.output[0] if node.output else ""), node.op_type)

    def shape(i: int) -> Shape | None:
        return shapes.get(node.input[i]) if i < len(node.input) and node.input[i] else None

    def where(i: int, s: Shape) -> str:
        return f"{label}: {names[i]} '{node.input[i]}' has shape {list(s)}"

    for i in per_tensor:
        s = shape(i)
        if s is not None and s not in ((), (1,)):
            return f"{where(i, s)}; ONNX Runtime accepts only a scalar or [1] (one value)"
    w = shape(w_idx)
    if w is None or len(w) < 2:  # unknown, or left to shape inference and the handler
        return None
    attrs = {a.name: int(a.i) for a in node.attribute if a.type == onnx.AttributeProto.INT}
    allowed, wording = _per_column_shapes(node.op_type, w, attrs)
    for i in per_column:
        s = shape(i)
        if s is not None and s not in ((), (1,), *allowed):
            return f"{where(i, s)}; ONNX Runtime accepts a scalar, [1] or {wording}"
    if node.op_type == "QGemm":  # its zero point must also have its scale's shape
        s, z = shape(4), shape(5)
        if s is not None and z is not None and s != z:
            return (
                f"{where(5, z)} but b_scale '{node.input[4]}' has shape {list(s)}; "
                "ONNX Runtime's QGemm needs the two of one shape"
            )
    return None


def ort_refusal(m: onnx.ModelProto) -> str | None:
    """Why ONNX Runtime would refuse shape-inferred model `m` although the ONNX checker
    accepts it, as one line, or None."""
    dup = duplicate_node_name(m.graph)
    if dup is not None:
        return (
            f"two nodes are named '{dup}'; ONNX Runtime refuses a model whose node names "
            "are not unique"
        )
    shapes = static_shapes(m.graph)
    for n in m.graph.node:
        why = missing_required_input(n) or quant_param_refusal(n, shapes)
        if why is not None:
            return why
    return None
