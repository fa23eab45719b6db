"""`run_batched`: a dynamic-batch program runs all rows in one pass.

Row by row gives the same outputs and counters where every step is row-independent and
exact (NPU steps, host kernel terms, and, as on the digits models, host ONNX ops that do
no cross-element float arithmetic); host ONNX float steps run on the whole batch, as ORT
runs it (`tests/test_host_float_equals_ort.py`: a run-time-B float MatMul).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_helpers import npuc
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from sim_helpers import dq_float_matmul, io_model

from compiler.api import compile_model
from npu_backend.codegen import generate
from npu_backend.lowered import HostOnnx
from npu_backend.program import Program, ProgramError
from npu_backend.runner import _one_pass, host_onnx_outputs, load_inputs, run_batched
from npu_backend.simulator import SimulatorError, run
from npu_backend.target import load_target

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The README flow's program (digits_gemm_qop_s8s8_pc, dynamic batch) and its 360 rows."""
    d = tmp_path_factory.mktemp("digits")
    model = DIGITS / "digits_gemm_qop_s8s8_pc.onnx"
    np.savez(d / "float.npz", input=np.load(DIGITS / "digits_test.npz")["input"])
    p = npuc("inputs", str(model), "-o", str(d / "in.npz"), "--from", str(d / "float.npz"))
    assert p.returncode == 0, p.stderr
    p = npuc(
        "compile", str(model), "-o", str(d / "p.npuprog"), "--proofs-mode", "off",
        "--reference", "ort-host", "--timeout", "120",
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    prog = Program.load(d / "p.npuprog")
    assert prog.dynamic_batch
    return prog, load_inputs(d / "in.npz")


def test_one_pass_equals_row_by_row_outputs_and_counters(digits):
    prog, inputs = digits
    n = next(iter(inputs.values())).shape[0]
    assert n == 360
    assert _one_pass(prog, inputs, n)[0] is not None  # the wide pass is taken, not the fallback
    fast, cf = run_batched(prog, inputs)
    slow, cs = run_batched(prog, inputs, one_pass=False)
    assert set(fast) == set(slow) == set(prog.outputs)
    for o in prog.outputs:
        assert fast[o].dtype == slow[o].dtype and fast[o].shape[0] == n
        assert np.array_equal(fast[o], slow[o]), o
    assert cf.to_json() == cs.to_json()


def test_a_corrupted_row_is_caught_and_reported_as_row_by_row(digits):
    prog, inputs = digits
    name = prog.dynamic_batch[0]
    bad = dict(inputs)
    bad[name] = np.asarray(inputs[name])[:5].astype(np.float64)  # not the compiled dtype
    with pytest.raises(Exception) as fast:
        run_batched(prog, bad)
    with pytest.raises(Exception) as slow:
        run_batched(prog, bad, one_pass=False)
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)


def test_wrong_row_shape_is_still_a_program_error(digits):
    prog, inputs = digits
    name = prog.dynamic_batch[0]
    with pytest.raises(ProgramError, match="N rows"):
        run_batched(prog, {name: np.asarray(inputs[name])[:, :-1]})


# --- programs built here: integer-only, and a host float step that cannot widen ----------

TARGET = Path(__file__).resolve().parent.parent / "npu_backend" / "targets" / "npu_float.toml"


def _qlinear_matmul(k: int = 16, n: int = 8) -> onnx.ModelProto:
    """int8 x[N, k] -> QLinearMatMul(W) -> int8 y[N, n]: no host ONNX step.

    |W| <= 63: a pair of uint8 x int8 products stays inside int16, so ORT's u8s8 kernel is
    exact on an AVX2-only CPU too (the comparison does not depend on the host)."""
    rng = np.random.default_rng(3)
    c = [
        nh.from_array(np.float32(0.02), "xs"),
        nh.from_array(np.int8(3), "xz"),
        nh.from_array(rng.integers(-63, 64, size=(k, n)).astype(np.int8), "W"),
        nh.from_array(np.float32(0.01), "ws"),
        nh.from_array(np.int8(0), "wz"),
        nh.from_array(np.float32(0.05), "ys"),
        nh.from_array(np.int8(-2), "yz"),
    ]
    mm = oh.make_node(
        "QLinearMatMul", ["x", "xs", "xz", "W", "ws", "wz", "ys", "yz"], ["y"], name="mm"
    )
    return io_model([mm], c, (TP.INT8, ["N", k]), (TP.INT8, ["N", n]))


def _compiled(model: onnx.ModelProto):
    target = load_target(TARGET)
    r = compile_model(model, "bitwise", target, proofs_mode="off", reference="ort-host")
    return r.lowered, target


def _rows(n: int, k: int = 16) -> np.ndarray:
    return np.random.default_rng(4).integers(-128, 128, size=(n, k)).astype(np.int8)


def test_integer_only_program_one_pass_equals_row_by_row_and_ort():
    model = _qlinear_matmul()
    lowered, target = _compiled(model)
    prog = generate(lowered, target)
    assert prog.dynamic_batch == ("x",) and not host_onnx_outputs(prog)
    x = _rows(97)
    fast, cf = run_batched(prog, {"x": x})
    slow, cs = run_batched(prog, {"x": x}, one_pass=False)
    assert np.array_equal(fast["y"], slow["y"]) and cf.to_json() == cs.to_json()
    assert cf.host_calls == 0 and cf.instructions == 97 * run(prog, {"x": x[:1]})[1].instructions
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.array_equal(fast["y"], sess.run(None, {"x": x})[0])


def test_host_float_batch_counters_stay_those_of_one_row_runs():
    lowered, target = _compiled(dq_float_matmul())
    prog = generate(lowered, target)
    assert host_onnx_outputs(prog) == ("xf", "wf", "y")  # DequantizeLinear x, W; MatMul
    x = _rows(64)
    got, c = run_batched(prog, {"x": x})
    assert got["y"].shape == (64, 8)
    # counters stay those of 64 one-row runs (three host calls per row), as row by row
    assert c.to_json() == run_batched(prog, {"x": x}, one_pass=False)[1].to_json()
    assert c.host_calls == 3 * 64


def _with_one_row_constant(step: HostOnnx) -> HostOnnx:
    """The step's model with a float Relu after a Reshape to the one-row shape [1, 8]: not
    a layout step, so it runs on the whole batch, where the Reshape fails."""
    m = onnx.ModelProto.FromString(step.model)
    out = m.graph.node[-1].output[0]
    m.graph.node[-1].output[0] = "pre"
    m.graph.initializer.append(nh.from_array(np.array([1, 8], np.int64), "one_row"))
    m.graph.node.extend(
        [
            oh.make_node("Reshape", ["pre", "one_row"], ["flat"]),
            oh.make_node("Relu", ["flat"], [out]),
        ]
    )
    return dataclasses.replace(step, model=m.SerializeToString())


def test_host_float_step_that_cannot_run_on_the_batch_is_an_error_not_row_by_row():
    lowered, target = _compiled(dq_float_matmul())
    lowered.steps = [
        _with_one_row_constant(s) if isinstance(s, HostOnnx) and s.outputs == ("y",) else s
        for s in lowered.steps
    ]
    prog = generate(lowered, target)
    x = _rows(5)
    one, _ = run(prog, {"x": x[:1]})  # the one-row program itself runs
    slow, _ = run_batched(prog, {"x": x}, one_pass=False)
    assert np.array_equal(slow["y"][:1], one["y"])
    with pytest.raises(SimulatorError, match="cannot run in one pass.*Reshape.*row by row"):
        run_batched(prog, {"x": x})
