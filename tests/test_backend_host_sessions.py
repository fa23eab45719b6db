"""Host ONNX steps' sessions: kept least recently used first, bounded by count and bytes."""

from __future__ import annotations

import numpy as np
import onnx
from call_counter import count_calls
from onnx import TensorProto as TP
from onnx import helper as oh

import npu_backend.host as H
from npu_backend.lowered import HostOnnx


def _step(k: int) -> HostOnnx:
    """A host step adding the constant k (each k its own model bytes)."""
    c = onnx.numpy_helper.from_array(np.asarray([k], dtype=np.int32), "c")
    g = oh.make_graph(
        [oh.make_node("Add", ["x", "c"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", TP.INT32, [2])],
        [oh.make_tensor_value_info("y", TP.INT32, [2])],
        [c],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return HostOnnx(f"h{k}", m.SerializeToString(), ("x",), ("y",), (), ("Add",))


def test_each_session_is_made_once_across_runs_of_many_steps(monkeypatch):
    """40 host steps run twice (the ledger's two runs): 40 sessions, not 80 (a cache of 32
    that was cleared when full made every one again), and every result is the step's."""
    monkeypatch.setattr(H, "_SESSIONS", H.OrderedDict())
    import onnxruntime as ort

    made = count_calls(monkeypatch, ort, "InferenceSession")
    steps = [_step(k) for k in range(40)]
    x = np.array([1, 2], dtype=np.int32)
    for _ in range(2):
        for k, st in enumerate(steps):
            assert H.run_onnx(st, {"x": x})["y"].tolist() == [1 + k, 2 + k]
    assert len(made) == 40


def test_the_oldest_sessions_go_first_beyond_the_byte_budget(monkeypatch):
    monkeypatch.setattr(H, "_SESSIONS", H.OrderedDict())
    steps = [_step(k) for k in range(6)]
    size = len(steps[0].model)
    monkeypatch.setattr(H, "MAX_SESSION_BYTES", 3 * size + 10)
    x = np.array([0, 0], dtype=np.int32)
    for st in steps[:3]:
        H.run_onnx(st, {"x": x})
    H.run_onnx(steps[0], {"x": x})  # used again: now the most recent
    H.run_onnx(steps[3], {"x": x})  # over budget: the least recently used (step 1) goes
    kept = [m for m, _ in H._SESSIONS]
    assert kept == [steps[2].model, steps[0].model, steps[3].model]
