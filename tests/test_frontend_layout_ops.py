"""Flatten, Squeeze and Unsqueeze (every opset form) read as a `reshape`, equal to ORT."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session


def _model(op, shape, opset, attrs=None, axes=None, out=None) -> onnx.ModelProto:
    inits, ins = [], ["x"]
    if axes is not None:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        ins.append("axes")
    g = oh.make_graph(
        [oh.make_node(op, ins, ["y"], name="n", **(attrs or {}))],
        "g",
        [oh.make_tensor_value_info("x", TP.INT8, list(shape))],
        [oh.make_tensor_value_info("y", TP.INT8, out)],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    return m if out else onnx.shape_inference.infer_shapes(m)


CASES = [
    ("Flatten", (2, 3, 4, 5), 13, dict(axis=2), None),
    ("Flatten", (2, 3, 4, 5), 13, dict(axis=-1), None),
    ("Flatten", (2, 3, 4, 5), 9, dict(axis=0), None),
    ("Flatten", (2, 3, 4, 5), 13, dict(axis=4), None),
    ("Flatten", (2, 3, 1, 1), 21, None, None),
    ("Squeeze", (1, 3, 1, 5), 13, None, [0, -2]),
    ("Squeeze", (1, 3, 1, 5), 13, None, None),
    ("Squeeze", (1, 3, 1, 5), 11, dict(axes=[2]), None),
    ("Unsqueeze", (3, 5), 13, None, [0, -1]),
    ("Unsqueeze", (3, 5), 11, dict(axes=[1]), None),
    ("Unsqueeze", (3, 5), 21, None, [2]),
]


@pytest.mark.parametrize("op, shape, opset, attrs, axes", CASES)
def test_layout_op_is_a_reshape_equal_to_onnxruntime(op, shape, opset, attrs, axes):
    m = _model(op, shape, opset, attrs, axes)
    g, _ = to_ir(m)
    assert [n.op for n in g.nodes] == ["reshape"]
    x = np.random.default_rng(0).integers(-128, 128, size=shape).astype(np.int8)
    ref = session(m).run(None, {"x": x})[0]
    got = run_graph(g, {"x": x})["y"]
    assert got.shape == ref.shape
    np.testing.assert_array_equal(ref, got)


def test_squeezing_an_axis_that_is_not_one_is_a_one_line_error():
    with pytest.raises(FrontendError, match="must be 1"):
        to_ir(_model("Squeeze", (1, 3, 1, 5), 13, None, [1], out=[1, 1, 5]))
