"""Constant: its value becomes a constant the other converters read (no IR node).

Versions read: 1+ (`value`; 11 adds `sparse_value`; 12 the scalar and list forms and
`value_string(s)`, a string constant: an object array of text, which only host ops read).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..context import BuildContext
from ..elem_types import MAX_ELEMENTS
from ..registry import converter

VALUE_ATTRIBUTES = (
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
)


@converter("", "Constant", since=1, attributes=(*VALUE_ATTRIBUTES, "sparse_value"))
def constant(ctx: BuildContext, n: onnx.NodeProto) -> None:
    """Constant: its value joins the constants converters read (no IR node)."""
    ctx.consts[n.output[0]] = constant_value(ctx, n)


def constant_value(ctx: BuildContext, n: onnx.NodeProto) -> np.ndarray:
    """The value of a Constant node (strings: object arrays of text, as ORT holds them)."""
    attrs = ctx.attrs(n)
    if len(attrs) != 1:
        raise ctx.fail(n, "a Constant needs exactly one value attribute")
    ((name, v),) = attrs.items()
    if name == "value":
        return numpy_helper.to_array(v)
    if name in ("value_float", "value_floats"):
        return np.asarray(v, dtype=np.float32)
    if name in ("value_int", "value_ints"):
        return np.asarray(v, dtype=np.int64)
    if name in ("value_string", "value_strings"):
        text = [v] if name == "value_string" else list(v)
        arr = np.asarray([t.decode("utf-8", "replace") for t in text], dtype=object)
        return arr.reshape(()) if name == "value_string" else arr
    return dense(ctx, n, v)


def dense(ctx: BuildContext, n: onnx.NodeProto, sp: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse_value as a dense array (ONNX: linear or [NNZ, rank] coordinate indices)."""
    values = numpy_helper.to_array(sp.values).reshape(-1)
    idx = numpy_helper.to_array(sp.indices).astype(np.int64)
    dims = tuple(int(d) for d in sp.dims)
    if int(np.prod(dims, dtype=object)) > MAX_ELEMENTS:
        raise ctx.fail(n, f"sparse_value shape {list(dims)} has more than 2^31 elements")
    out = np.zeros(dims, dtype=values.dtype)
    if idx.ndim == 2:
        idx = np.ravel_multi_index(tuple(idx.T), dims) if idx.size else idx.reshape(-1)
    out.reshape(-1)[idx.reshape(-1)] = values
    return out
