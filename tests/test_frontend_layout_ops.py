"""Flatten, Squeeze and Unsqueeze (every opset form) read as a `reshape`, Slice as a
`slice`, equal to ORT; after an NPU op each is an NPU gather equal to ORT."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from compiler.api import compile_model
from compiler.errors import FrontendError
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import HostOnnx, NpuMove
from npu_backend.target import load_target


def _model(op, shape, opset, attrs=None, axes=None, out=None, inputs=()) -> onnx.ModelProto:
    inits, ins = [], ["x"]
    if axes is not None:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        ins.append("axes")
    for k, v in enumerate(inputs):
        inits.append(numpy_helper.from_array(np.asarray(v, np.int64), f"in{k}"))
        ins.append(f"in{k}")
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


@pytest.mark.parametrize(
    "op, shape, opset, attrs, axes",
    [
        c if k in (0, 5, 9) else pytest.param(*c, marks=pytest.mark.slow)
        for k, c in enumerate(CASES)
    ],
)
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


SLICES = [
    ((2, 5, 6), 13, None, ([1, -4], [5, 100], [1, 2], [2, 1])),
    ((2, 5, 6), 13, None, ([-1], [-100], [2], [-2])),  # backwards to the start
    ((2, 5, 6), 11, None, ([4, 0], [0, 1], [1, 0], [-1, 1])),
    ((2, 5, 6), 13, None, ([0], [3])),  # axes and steps absent
    ((2, 5, 6), 9, dict(starts=[1], ends=[4], axes=[2]), ()),
]


@pytest.mark.parametrize(
    "shape, opset, attrs, inputs",
    [c if k in (0, 1) else pytest.param(*c, marks=pytest.mark.slow) for k, c in enumerate(SLICES)],
)
def test_slice_equals_onnxruntime(shape, opset, attrs, inputs):
    m = _model("Slice", shape, opset, attrs, inputs=inputs)
    g, _ = to_ir(m)
    assert [n.op for n in g.nodes] == ["slice"]
    x = np.random.default_rng(0).integers(-128, 128, size=shape).astype(np.int8)
    ref = session(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ref, run_graph(g, {"x": x})["y"])
    r = compile_model(m, "bitwise", None)  # the graph input is on the host: a host Slice
    prog = codegen.generate(r.lowered, load_target("npu_backend/targets/npu_float.toml"))
    np.testing.assert_array_equal(ref, simulator.run(prog, {"x": x})[0]["y"])


@pytest.mark.parametrize(
    "steps", [[1, 2, -1, 1], pytest.param([1, 1, 2, 1], marks=pytest.mark.slow)]
)
def test_slice_of_an_npu_result_is_a_proven_npu_gather(steps):
    from pool_models import conv_chain, pool_inputs

    m = conv_chain(("3x3",))
    m.graph.node[-1].output[0] = "c"
    starts = [0, 1, 5 if steps[2] < 0 else 1, 0]
    ends = [1, 4, -100 if steps[2] < 0 else 6, 5]
    for name, v in (("st", starts), ("en", ends), ("ax", [0, 1, 2, 3]), ("sp", steps)):
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
    m.graph.node.append(oh.make_node("Slice", ["c", "st", "en", "ax", "sp"], ["y"], name="sl"))
    z = np.zeros((1, 4, 6, 5))
    out = z[
        tuple(
            slice(b, None if e < -50 else e, k) for b, e, k in zip(starts, ends, steps, strict=True)
        )
    ]
    m.graph.output[0].CopyFrom(oh.make_tensor_value_info("y", 3, list(out.shape)))
    T = load_target("npu_backend/targets/npu_float.toml")
    r = compile_model(m, "bitwise", T)
    assert not [s for s in r.lowered.steps if isinstance(s, HostOnnx)]
    assert [s for s in r.lowered.steps if isinstance(s, NpuMove)][-1].onnx_nodes == ("sl",)
    prog = codegen.generate(r.lowered, T)
    for seed in range(2):
        inp = pool_inputs(m, seed)
        ref = session(m).run(None, inp)[0]
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])


def test_slice_with_ends_orts_folding_knows_is_a_slice():
    # ends = Shape(x)[1] / 2: computed from static shapes before the run (a channel split)
    inits = [
        numpy_helper.from_array(np.asarray([0], np.int64), "st"),
        numpy_helper.from_array(np.asarray([1], np.int64), "ax"),
        numpy_helper.from_array(np.asarray(1, np.int64), "one"),
        numpy_helper.from_array(np.asarray(2, np.int64), "two"),
        numpy_helper.from_array(np.asarray([0], np.int64), "zero"),
    ]
    nodes = [
        oh.make_node("Shape", ["x"], ["s"], name="shape"),
        oh.make_node("Gather", ["s", "one"], ["c"], name="g"),
        oh.make_node("Div", ["c", "two"], ["h"], name="div"),
        oh.make_node("Unsqueeze", ["h", "zero"], ["e"], name="u"),
        oh.make_node("Slice", ["x", "st", "e", "ax"], ["y"], name="sl"),
    ]
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TP.INT8, [1, 6, 3])],
        [oh.make_tensor_value_info("y", TP.INT8, [1, 3, 3])],
        inits,
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])
    m.ir_version = 8
    ir, _ = to_ir(m)
    assert ir.nodes[-1].op == "slice"
    x = np.random.default_rng(0).integers(-128, 128, size=(1, 6, 3)).astype(np.int8)
    np.testing.assert_array_equal(session(m).run(None, {"x": x})[0], run_graph(ir, {"x": x})["y"])
