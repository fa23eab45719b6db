"""An Identity or no-op Reshape next to a host node (issue 10, finding 6): cleanup removes it
and renames the host node's ONNX inputs/outputs too (was: exit 4, "Node input ... is not a
graph input, initializer, or output of a previous node")."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import const, make, weights
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from qdq_models import check_end_to_end, ort_run

from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.passes import cleanup


def _model(layout: str, where: str) -> onnx.ModelProto:
    """float x -> [layout] -> QuantizeLinear (host) -> QLinearMatMul -> [layout] -> DQ (host).

    `where`: `before` (between input and QuantizeLinear), `after` (between the matmul and
    DequantizeLinear) or `output` (after DequantizeLinear, producing the graph output).
    """
    inits = [nh.from_array(weights(16, 4), "W")] + [
        const(n, v, t)
        for n, v, t in [("s", 0.02, "float32"), ("z", 0, "int8"), ("ws", 0.01, "float32"),
                        ("ys", 0.05, "float32")]
    ]  # fmt: skip
    inits.append(nh.from_array(np.array([2, 16], np.int64), "shp16"))
    inits.append(nh.from_array(np.array([2, 4], np.int64), "shp4"))

    def noop(inp: str, out: str, shape: str) -> onnx.NodeProto:
        if layout == "identity":
            return oh.make_node("Identity", [inp], [out], name=f"noop_{out}")
        return oh.make_node("Reshape", [inp, shape], [out], name=f"noop_{out}")

    nodes, cur = [], "xf"
    if where == "before":
        nodes.append(noop(cur, "xi", "shp16"))
        cur = "xi"
    nodes.append(oh.make_node("QuantizeLinear", [cur, "s", "z"], ["xq"], name="quant"))
    nodes.append(
        oh.make_node("QLinearMatMul", ["xq", "s", "z", "W", "ws", "z", "ys", "z"], ["h"], name="mm")
    )
    cur = "h"
    if where == "after":
        nodes.append(noop(cur, "h2", "shp4"))
        cur = "h2"
    out = "y" if where != "output" else "yd"
    nodes.append(oh.make_node("DequantizeLinear", [cur, "ys", "z"], [out], name="dq"))
    if where == "output":
        nodes.append(noop(out, "y", "shp4"))
    m = make(
        nodes,
        [oh.make_tensor_value_info("xf", TP.FLOAT, [2, 16])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [2, 4])],
        inits,
        name="t",
        full_check=True,
    )
    return m


CASES = [(lay, w) for lay in ("identity", "reshape") for w in ("before", "after", "output")]


@pytest.mark.parametrize("layout, where", CASES)
def test_cleanup_keeps_host_nodes_runnable(layout, where):
    m = _model(layout, where)
    g, _ = to_ir(m)
    g = cleanup.run(g)
    assert not any(n.op in ("identity", "reshape") for n in g.nodes)  # really removed
    feeds = {"xf": np.random.default_rng(0).uniform(-3, 3, (2, 16)).astype(np.float32)}
    np.testing.assert_array_equal(run_graph(g, feeds)["y"], ort_run(m, feeds)[0])


@pytest.mark.parametrize("layout, where", [("identity", "before"), ("reshape", "after")])
def test_noop_next_to_host_node_end_to_end(layout, where, tmp_path):
    feeds = {"xf": np.random.default_rng(1).uniform(-3, 3, (2, 16)).astype(np.float32)}
    check_end_to_end(_model(layout, where), feeds, tmp_path)


def test_identity_before_a_matmul_that_falls_back_to_the_host(tmp_path):
    """u8s8 MatMulInteger whose pairs can saturate: under `ort-x86-avx2` it stays on the host,
    rebuilt from the original ONNX nodes, which must read the input cleanup renamed."""
    nodes = [
        oh.make_node("Identity", ["x"], ["xi"], name="id"),
        oh.make_node("MatMulInteger", ["xi", "W"], ["y"], name="mm"),
    ]
    m = make(
        nodes,
        [oh.make_tensor_value_info("x", TP.UINT8, [2, 16])],
        [oh.make_tensor_value_info("y", TP.INT32, [2, 4])],
        [nh.from_array(np.full((16, 4), 127, np.int8), "W")],
        name="t",
        full_check=True,
    )
    feeds = {"x": np.full((2, 16), 255, np.uint8)}
    check_end_to_end(m, feeds, tmp_path, args=("--reference", "ort-x86-avx2"))


@pytest.mark.parametrize("layout", ["identity", "reshape"])
def test_host_fallback_of_a_fused_site_reincludes_the_bypassed_layout_op(layout):
    """QLinearMatMul -> Identity|no-op Reshape -> QLinearSigmoid fuses; if the fused step must
    stay on the host (e.g. buffers beyond SRAM), its original ONNX nodes read the bypassed
    op's output: the fallback subgraph includes that op and equals ONNX Runtime."""
    from compiler.api import compile_model
    from compiler.passes.lower import Lowerer

    inits = [nh.from_array(weights(16, 4), "W"), nh.from_array(np.array([3, 4], np.int64), "shp")]
    inits += [
        const(n, v, t)
        for n, v, t in [("s", 0.02, "float32"), ("z", 0, "int8"), ("ws", 0.01, "float32"),
                        ("ys", 0.05, "float32"), ("os", 1 / 256, "float32"), ("oz", -128, "int8")]
    ]  # fmt: skip
    mid = (
        oh.make_node("Identity", ["h"], ["h2"], name="mid")
        if layout == "identity"
        else oh.make_node("Reshape", ["h", "shp"], ["h2"], name="mid")
    )
    nodes = [
        oh.make_node("QLinearMatMul", ["x", "s", "z", "W", "ws", "z", "ys", "z"], ["h"], name="mm"),
        mid,
        oh.make_node(
            "QLinearSigmoid",
            ["h2", "ys", "z", "os", "oz"],
            ["y"],
            name="act",
            domain="com.microsoft",
        ),
    ]
    m = make(
        nodes,
        [oh.make_tensor_value_info("x", TP.INT8, [3, 16])],
        [oh.make_tensor_value_info("y", TP.INT8, [3, 4])],
        inits,
        name="t",
        full_check=True,
    )
    r = compile_model(m)
    fused = next(n for n in r.graph.nodes if n.op == "fused")
    (step,) = Lowerer(r.graph, r.context).host_origin(fused)
    import onnxruntime as ort

    feeds = {"x": np.random.default_rng(2).integers(-128, 128, (3, 16)).astype(np.int8)}
    got = ort.InferenceSession(step.model, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(got[0], ort_run(m, feeds)[0])
