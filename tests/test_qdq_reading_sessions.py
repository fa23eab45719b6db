"""The integer QDQ reading asks ONNX Runtime for its level-off graph only when it needs it.

Level off makes no integer kernel of a QDQ group, so a default-level rewrite that made one
the model lacks computes differently without asking: one session fewer per QDQ model. A
rewrite that runs the kernels the graph as written runs keeps it without asking either
(level off sits between the two). Any other rewrite still compares with the level-off graph.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto
from onnx import helper as oh
from test_qdq_reading_project_ops import qdq_matmul

from compiler.frontend import qdq_reading as qr


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = qr._graph_off

    def counted(data: bytes) -> onnx.ModelProto:
        calls.append(1)
        return real(data)

    monkeypatch.setattr(qr, "_graph_off", counted)
    return calls


def test_a_rewrite_that_made_integer_kernels_is_read_without_the_level_off_graph(monkeypatch):
    m = qdq_matmul(with_requantize=False)
    calls = _counting(monkeypatch)
    r = qr.integer_reading(m)
    assert calls == [] and r is not m
    assert qr._integer_kernels_made(m, r)
    # what the skipped comparison would have said
    off = qr._graph_off(m.SerializeToString())
    assert qr.computes_differently(off, r)


def _relu(constant: bool) -> onnx.ModelProto:
    """A float Relu model; with `constant`, its input first added to a Constant node's value
    (ORT makes such a node an initializer at every level, level off included)."""
    nodes = [oh.make_node("Relu", ["s" if constant else "x"], ["y"], name="r")]
    if constant:
        c = oh.make_tensor("c", TensorProto.FLOAT, [1, 4], [1.0, 2.0, 3.0, 4.0])
        nodes[:0] = [
            oh.make_node("Constant", [], ["k"], name="k", value=c),
            oh.make_node("Add", ["x", "k"], ["s"], name="a"),
        ]
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_rewrite_that_runs_the_same_kernels_is_read_without_the_level_off_graph(monkeypatch):
    m = _relu(constant=False)
    calls = _counting(monkeypatch)
    assert qr.integer_reading(m) is m
    assert calls == []
    # what the skipped comparison would have said: level off runs these kernels too
    off = qr._graph_off(m.SerializeToString())
    assert not qr.computes_differently(off, m) and not qr.drops_values(m, off)


def test_a_rewrite_that_made_none_is_compared_with_the_level_off_graph(monkeypatch):
    """Negative: a float model's rewrite makes no QDQ kernel but folds a Constant node; the
    level-off graph is read and, folding it too, the model is read as written."""
    m = _relu(constant=True)
    r = qr.ort_integer_model(m)
    assert qr.computes_differently(m, r) and not qr._integer_kernels_made(m, r)
    calls = _counting(monkeypatch)
    assert qr.integer_reading(m) is m
    assert calls == [1]
