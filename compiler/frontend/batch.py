"""A symbolic batch dimension: fix it for the analysis, and show rows stay independent.

quantize_static and most exporters keep the leading dimension of graph inputs symbolic
('N', or no value at all). Every obligation the prover checks is about one element (the
epilogue of one accumulator, a table, a requantization) or about index maps within a
row, so no verdict or obligation hash depends on the number of rows, provided each row
is computed from its own input row only. `fix_batch` checks that structurally on the
ONNX model before fixing the dimension:

- with the batch set to two different sizes, every value computed from a batched input
  has a known shape in which exactly one axis differs, holds the batch size, and has only
  unit axes before it: each row is one contiguous block in row-major order, in row order
  (a Reshape/Transpose/Concat/reduction that interleaves or merges rows fails this; ORT's
  ArrayFeatureExtractor output [1, B] passes). Graph outputs keep the batch leading;
- no node works along the batch axis of its data input (an `axis`/`axes` attribute, or
  the constant `axes` input of a reduction or CumSum): those keep the shape but mix rows
  (e.g. Softmax over the batch axis).

`compiler.frontend.reader.to_ir` builds the model at both probe sizes to get the shapes, then at
the batch asked for (default 1). A program compiled for one row therefore runs a batch
of B rows as B independent rows (`npu_backend.runner`).
"""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from compiler.errors import FrontendError

from .overridable import constant_initializers

PROBE_SIZES = (2, 3)
# ops whose axes come as an input (index) rather than an attribute
_AXES_INPUT = {"CumSum": 1, "ReduceSum": 1}
_REDUCE_PREFIX = "Reduce"


def dynamic_inputs(m: onnx.ModelProto) -> tuple[str, ...]:
    """Graph inputs (not constant initializers) whose leading dimension has no fixed value."""
    inits = {i.name for i in constant_initializers(m)}
    out = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):  # 'N' or no value (0 is static)
            out.append(vi.name)
    return tuple(out)


def with_batch(m: onnx.ModelProto, names: tuple[str, ...], batch: int) -> onnx.ModelProto:
    """A copy of `m` with the leading dimension of inputs `names` (and outputs) set to `batch`.

    Intermediate value_info is dropped and re-inferred.
    """
    c = onnx.ModelProto()
    c.CopyFrom(m)
    del c.graph.value_info[:]
    for vi in c.graph.input:
        if vi.name in names:
            d = vi.type.tensor_type.shape.dim[0]
            d.Clear()
            d.dim_value = batch
    for vi in c.graph.output:
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.Clear()
    try:
        return onnx.shape_inference.infer_shapes(c, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001
        msg = " ".join(str(e).split())[:300]
        raise FrontendError(f"shape inference with batch {batch} failed: {msg}") from None


def _node_label(n: onnx.NodeProto) -> str:
    return f"node '{n.name or n.output[0]}' ({n.op_type})"


def check_rows_independent(
    m: onnx.ModelProto,
    names: tuple[str, ...],
    shapes: dict[int, dict[str, tuple[int, ...]]],
) -> None:
    """Raise `FrontendError` unless every row of the outputs depends on its input row only.

    `shapes` maps each of the two `PROBE_SIZES` to the value shapes of the model built
    with that batch (the IR's values: ONNX inference, or ONNX Runtime for host ops
    without one). Values inside a lowered group (absent at both sizes) are skipped.
    """
    a, b = PROBE_SIZES
    sa, sb = shapes[a], shapes[b]
    inits = {i.name: i for i in constant_initializers(m)}
    axis_of: dict[str, int] = {name: 0 for name in names}
    outputs = {o.name for o in m.graph.output}
    for n in m.graph.node:
        data = n.input[0] if n.input else ""
        if data in axis_of:
            rank = len(sa.get(data) or ())
            if rank and axis_of[data] in _axes(n, inits, rank):
                raise FrontendError(
                    f"{_node_label(n)}: works along the batch axis (rows are not "
                    "independent); give the model static shapes"
                )
        if not any(i in axis_of for i in n.input if i):
            continue
        for o in n.output:
            if not o:
                continue
            x, y = sa.get(o), sb.get(o)
            if x is None and y is None:
                continue
            if x is None or y is None:
                raise FrontendError(
                    f"{_node_label(n)}: the shape of '{o}' is unknown with a dynamic batch; "
                    "give the model static shapes"
                )
            k = batch_axis(x, y)
            if k is None or (o in outputs and k != 0):
                raise FrontendError(
                    f"{_node_label(n)}: output '{o}' (shape {list(x)} at batch {a}) does not "
                    "keep each row's elements together; give the model static shapes"
                )
            axis_of[o] = k


def batch_axis(x: tuple[int, ...], y: tuple[int, ...]) -> int | None:
    """The axis of a value that holds the batch, given its shapes at the two probe sizes.

    It must be the first axis of size other than 1 (so each row's elements stay one
    contiguous block in row-major order), the only axis that differs between the sizes.
    """
    a, b = PROBE_SIZES
    if len(x) != len(y):
        return None
    diff = [k for k in range(len(x)) if x[k] != y[k]]
    if len(diff) != 1:
        return None
    k = diff[0]
    if x[k] != a or y[k] != b or any(d != 1 for d in x[:k]):
        return None
    return k


def _axes(n: onnx.NodeProto, inits: dict, rank: int) -> set[int]:
    """The axes a node works along (normalized), from attributes or a constant axes input."""
    if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 1:
        s = inits.get(n.input[1])
        if s is not None and len(s.dims) == 0 or (s is not None and list(s.dims) == [1]):
            return set()  # a per-tensor scale: the axis attribute has no effect
    out: set[int] = set()
    for at in n.attribute:
        if at.name == "axis":
            out.add(int(at.i))
        elif at.name == "axes":
            out |= {int(v) for v in at.ints}
    idx = _AXES_INPUT.get(n.op_type, 1 if n.op_type.startswith(_REDUCE_PREFIX) else None)
    if idx is not None and idx < len(n.input) and n.input[idx] in inits:
        out |= {int(v) for v in numpy_helper.to_array(inits[n.input[idx]]).reshape(-1)}
    elif idx is not None and idx < len(n.input) and n.input[idx]:
        out |= set(range(rank))  # axes known only at run time (e.g. overridable): any axis
    return {v + rank if v < 0 else v for v in out}
