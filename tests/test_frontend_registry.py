"""The frontend's converter registry (compiler.frontend.registry): lookup by domain, op and the
model's opset version; an op with no converter, or a version no converter claims, runs on the
host with an `unsupported_op` placement naming op and version; overlapping claims are an error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from compiler.errors import FrontendError
from compiler.frontend.f16_context import PROJECT_DOMAIN
from compiler.frontend.ops.elementwise import clip
from compiler.frontend.ops.host import float_op
from compiler.frontend.reader import INTERPRETED_ATTRIBUTES, to_ir
from compiler.frontend.registry import (
    NEWEST_READ,
    REGISTRY,
    DuplicateConverter,
    Registry,
    opset_version,
)
from compiler.ort.host import host_diagnostics
from prover.verdict import ReasonCode


def _fake(tag: str):
    def fn(ctx, n) -> None:
        ctx.append(tag)

    fn.__qualname__ = tag
    return fn


def test_lookup_picks_the_converter_whose_range_holds_the_opset():
    r = Registry()
    r.converter("", "Foo", since=1, until=10)(_fake("v1"))
    r.converter("ai.onnx", "Foo", since=11, until=12)(_fake("v11"))
    r.converter("", "Foo", since=13)(_fake("v13"))
    got = {v: r.lookup("", "Foo", v) for v in (1, 10, 11, 12, 13, NEWEST_READ[""])}
    assert {v: c.fn.__qualname__ for v, c in got.items()} == {
        1: "v1", 10: "v1", 11: "v11", 12: "v11", 13: "v13", NEWEST_READ[""]: "v13",
    }  # fmt: skip
    # "ai.onnx" and "" are one domain; outside every range, and another domain: nothing
    assert r.lookup("ai.onnx", "Foo", 11) is got[11]
    assert r.lookup("", "Foo", NEWEST_READ[""] + 1) is None
    assert r.lookup("com.microsoft", "Foo", 1) is None
    assert r.unclaimed_reason("", "Foo", 0) == (
        "Foo (domain 'ai.onnx', opset 0) has no converter for this version "
        f"(converters: 1-10, 11-12, 13-{NEWEST_READ['']})"
    )
    assert r.unclaimed_reason("", "Bar", 17) == "Bar (domain 'ai.onnx', opset 17) has no NPU form"


@pytest.mark.parametrize("since, until", [(5, 5), (1, 3), (3, 9), (1, 20)])
def test_a_second_converter_for_a_claimed_version_is_an_error(since, until):
    r = Registry()
    r.converter("", "Foo", since=3, until=5)(_fake("first"))
    with pytest.raises(DuplicateConverter, match=r"Foo .*first already claims 3-5"):
        r.converter("", "Foo", since=since, until=until)(_fake("second"))
    r.converter("", "Foo", since=6, until=7)(_fake("adjacent"))  # disjoint: fine
    r.converter("com.microsoft", "Foo", since=3, until=5)(_fake("other domain"))


def test_the_shipped_registry_has_no_overlap_and_declares_the_same_attributes():
    with pytest.raises(DuplicateConverter):
        REGISTRY.converter("", "QLinearMatMul", since=21)(_fake("again"))
    with pytest.raises(ValueError, match="give `until`"):
        Registry().converter("com.example", "Foo", since=1)
    assert INTERPRETED_ATTRIBUTES["Reshape"] == {"allowzero"}
    assert INTERPRETED_ATTRIBUTES["QuantizeLinear"] == {
        "axis", "block_size", "output_dtype", "saturate", "precision",
    }  # fmt: skip
    assert "Cast" not in INTERPRETED_ATTRIBUTES  # reads `to` itself; ORT runs the other Casts


def test_clip_opset_10_is_the_float_host_op_and_11_on_the_integer_converter():
    assert REGISTRY.lookup("", "Clip", 6).fn is float_op
    assert REGISTRY.lookup("", "Clip", 10).fn is float_op
    assert REGISTRY.lookup("", "Clip", 11).fn is clip
    assert REGISTRY.lookup("", "Clip", 1) is None  # Clip-1 (consumed_inputs) is not read
    assert opset_version({"ai.onnx": 12}, "") == 12 and opset_version({}, "x") == 0


def _qlinear_matmul(opset: int) -> onnx.ModelProto:
    inits = [
        nh.from_array(np.array(0.1, np.float32), "as"),
        nh.from_array(np.array(128, np.uint8), "az"),
        nh.from_array(np.ones((4, 3), np.int8), "w"),
        nh.from_array(np.array(0.05, np.float32), "ws"),
        nh.from_array(np.array(0, np.int8), "wz"),
        nh.from_array(np.array(0.2, np.float32), "ys"),
        nh.from_array(np.array(128, np.uint8), "yz"),
    ]
    node = oh.make_node(
        "QLinearMatMul", ["x", "as", "az", "w", "ws", "wz", "ys", "yz"], ["y"], name="qmm"
    )
    g = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TP.UINT8, [2, 4])],
        [oh.make_tensor_value_info("y", TP.UINT8, [2, 3])],
        inits,
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def test_an_opset_no_converter_claims_runs_on_the_host_naming_op_and_version():
    (npu,) = to_ir(_qlinear_matmul(NEWEST_READ[""]))[0].nodes
    assert npu.op == "matmul"
    future = NEWEST_READ[""] + 1  # onnx accepts it (QLinearMatMul-21 is its newest form)
    g, _ = to_ir(_qlinear_matmul(future))
    (n,) = g.nodes
    assert n.op == "host_onnx" and n.origin == ("qmm",)
    want = (
        f"node 'qmm' (QLinearMatMul) runs on the host: QLinearMatMul (domain 'ai.onnx', "
        f"opset {future}) has no converter for this version (converters: 10-{NEWEST_READ['']})"
    )
    assert n.attrs["placement"] == want
    (d,) = host_diagnostics(g)
    assert d.code is ReasonCode.UNSUPPORTED_OP and d.message == want


def test_an_op_with_no_converter_runs_on_the_host_naming_op_and_version():
    g = oh.make_graph(
        [oh.make_node("Abs", ["x"], ["y"], name="abs")],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
    )
    (n,) = to_ir(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]))[0].nodes
    assert n.op == "host_onnx"
    assert n.attrs["placement"] == (
        "node 'abs' (Abs) runs on the host: Abs (domain 'ai.onnx', opset 17) has no NPU form"
    )


def test_reshape_1_with_a_shape_attribute_is_not_read_as_reshape_5():
    """Reshape-1..4 take the shape as an attribute: no converter claims them (the one for
    5+ would have rejected the attribute as unknown), so ONNX Runtime runs it."""
    g = oh.make_graph(
        [oh.make_node("Reshape", ["x"], ["y"], name="r", shape=[3, 2])],
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [3, 2])],
    )
    (n,) = to_ir(oh.make_model(g, opset_imports=[oh.make_opsetid("", 4)]))[0].nodes
    assert n.op == "host_onnx" and g.output[0].name in n.outputs
    assert (
        "Reshape (domain 'ai.onnx', opset 4) has no converter for this version"
        in (n.attrs["placement"])
    )


def test_a_project_op_at_an_unclaimed_version_is_an_error_naming_it():
    g = oh.make_graph(
        [
            oh.make_node(
                "Requantize",
                ["x"],
                ["y"],
                name="rq",
                domain=PROJECT_DOMAIN,
                multiplier=1 << 30,
                shift=31,
            )
        ],  # fmt: skip
        "g",
        [oh.make_tensor_value_info("x", TP.INT32, [2, 3])],
        [oh.make_tensor_value_info("y", TP.INT8, [2, 3])],
    )
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(PROJECT_DOMAIN, 1)]
    )
    assert to_ir(m)[0].nodes[0].op == "requantize"
    m.opset_import[1].version = 2
    with pytest.raises(FrontendError, match=r"Requantize \(domain 'ai.npufusion', opset 2\) has no "
                       r"converter for this version \(converters: 1\)"):  # fmt: skip
        to_ir(m)
