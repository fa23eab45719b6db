"""Issue 24: the frontend never sinks a model ONNX Runtime runs.

Each reproducer (`host_models`) is one refusal of the issue: an unused opset import, BOOL
Cast/Equal, Expand/Slice/ConstantOfShape/Range on shapes computed from `Shape`, Identity of
an initializer used as a weight, Gather on int64 ids, If/Loop/Scan, LSTM/GRU/RNN, float16,
int64 and string tensors between host ops, a bool graph input. Each loads (its NPU
QLinearMatMul still in the IR), and `npuc compile` + `npuc run` equals ONNX Runtime's
default session bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_helpers import npuc
from host_models import REPRODUCERS, feeds, reshape_to_fed_shape

from compiler.api import compile_model
from compiler.frontend.reader import to_ir
from compiler.ort.host import host_diagnostics
from npu_backend.codegen import generate
from npu_backend.runner import run_batched
from npu_backend.target import load_target

# the reproducers whose host op has no NPU form: reported as `unsupported_op`
HOSTED = {
    "bool_cast": "Cast",
    "bool_equal": "Equal",
    "gather_embedding": "Gather",
    "if": "If",
    "loop": "Loop",
    "scan": "Scan",
    "lstm": "LSTM",
    "lstm_state_from_shape": "LSTM",
    "nonzero": "NonZero",
    "gru": "GRU",
    "rnn": "RNN",
    "string": "Cast",
}


def _ort_default(m: onnx.ModelProto, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, x), strict=True))


@pytest.mark.parametrize("name", list(REPRODUCERS))
def test_reproducer_is_read_with_its_npu_part(name):
    g, _ = to_ir(REPRODUCERS[name]())
    assert [n.op for n in g.nodes].count("matmul") == 1  # the QLinearMatMul: still checked
    if name in HOSTED:
        found = [d for d in host_diagnostics(g) if d.code.value == "unsupported_op"]
        assert any(f"({HOSTED[name]})" in d.message for d in found), [d.message for d in found]


def test_identity_of_an_initializer_is_a_constant_weight():
    """The QLinearMatMul reads its weight through an Identity: the weight is constant."""
    g, _ = to_ir(REPRODUCERS["identity_weight"]())
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert mm.inputs == ["q"]  # the weight is an attribute, not a run-time input


def test_shapes_from_shape_ops_are_inferred_as_ort_folds_them():
    """Reading the model as written (float QDQ reading, no ORT rewrite): the Slice end and
    the Range limit are computed from Shape(x) of a static x, as ORT's constant folding."""
    from compiler.ort.reference_host import resolve_reference

    ref = resolve_reference("onnx-qdq-float")
    g, _ = to_ir(REPRODUCERS["slice_to_shape"](), reference=ref)
    assert g.values["r"].shape == (2, 2)
    g, _ = to_ir(REPRODUCERS["constant_of_shape_range"](), reference=ref)
    assert g.values["pos"].shape == (3,) and g.values["pos"].dtype == "int64"
    g, _ = to_ir(REPRODUCERS["expand_to_shape"](), reference=ref)
    assert g.values["e"].shape == (2, 3)
    g, _ = to_ir(REPRODUCERS["expand_to_where_shape"](), reference=ref)
    assert g.values["e"].shape == (2, 3)  # the Where's bool mask is folded as well
    g, _ = to_ir(REPRODUCERS["lstm_state_from_shape"](), reference=ref)
    assert g.values["h0"].shape == (1, 1, 3)  # torch LSTM's initial state


def test_reshape_to_a_shape_folded_from_shape_ops_stays_in_the_ir():
    """BERT's Reshape to Concat(Shape(x)[:1], [-1]) is a layout op with a constant shape,
    as ORT's constant folding reads it (it once refused the model: 'must be a constant')."""
    g, _ = to_ir(REPRODUCERS["reshape_to_concat_shape"]())
    rs = next(n for n in g.nodes if n.op == "reshape")
    assert rs.attrs["shape"] == (2, 6) and g.values["r"].shape == (2, 6)


def test_reshape_and_transpose_of_constants_are_constants():
    """ViT's bias reshape (dynamic quantization) once stopped the model: 'is a constant'."""
    g, _ = to_ir(REPRODUCERS["layout_of_constants"]())
    assert not [n for n in g.nodes if n.op in ("reshape", "transpose")]
    add = next(n for n in g.nodes if n.origin == ("add_bias",))
    assert add.inputs == ["x"] and add.attrs["consts"]["b2"].shape == (1, 3)


def test_reshape_to_a_fed_shape_runs_on_the_host_and_equals_ort(tmp_path):
    """A Reshape whose shape only the run decides is hosted with the op that makes the
    shape static again; the model is not refused and equals ORT bit for bit."""
    m = reshape_to_fed_shape()
    g, _ = to_ir(m)
    assert [n.op for n in g.nodes].count("matmul") == 1
    found = [d.message for d in host_diagnostics(g) if d.code.value == "unsupported_op"]
    assert any("'reshape' (Reshape)" in d and "'sum'" in d for d in found), found
    program = generate(compile_model(m, "bitwise", proofs_mode="off").lowered, load_target(None))
    for shape in ([3, 2], [6, 1], [-1, 3]):
        x = {**feeds(m), "s": np.array(shape, np.int64)}
        got, _ = run_batched(program, x)
        for k, w in _ort_default(m, x).items():
            assert got[k].dtype == w.dtype and np.array_equal(got[k], w), (shape, k)


@pytest.mark.parametrize("name", list(REPRODUCERS))
def test_compile_and_run_equal_ort_default_bit_for_bit(name, tmp_path):
    m = REPRODUCERS[name]()
    x = feeds(m)
    model, prog = tmp_path / "m.onnx", tmp_path / "m.npu"
    onnx.save(m, model)
    np.savez(tmp_path / "in.npz", **x)
    r = npuc("compile", model, "-o", prog, "--proofs-mode", "off")
    assert r.returncode == 0, r.stderr
    assert (
        ":onnxruntime:" not in r.stderr
    )  # ORT's own log lines ([W:onnxruntime:, ...]) never reach stderr
    r = npuc("run", prog, "--input", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "out.npz") as z:
        got = {k: z[k] for k in z.files}
    want = _ort_default(m, x)
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        if w.dtype == object:  # ONNX strings: written to the .npz as text
            w = w.astype(str)
        assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
        assert np.array_equal(got[k], w), k


@pytest.mark.slow
def test_quant_pre_process_then_quantize_static_s8s8_end_to_end(tmp_path):
    """ORT's documented flow: `quant_pre_process` (which imports ai.onnx.training and other
    unused domains) then `quantize_static` QDQ s8s8: checked, compiled, run equal to ORT,
    and the divergence advice says ORT runs it as u8s8."""
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    b = nh.from_array(rng.standard_normal((4,)).astype(np.float32), "B")
    nodes = [
        oh.make_node("MatMul", ["x", "W"], ["m"]),
        oh.make_node("Add", ["m", "B"], ["a"]),
        oh.make_node("Sigmoid", ["a"], ["y"]),
    ]
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TP.FLOAT, [1, 8])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [1, 4])],
        [w, b],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "f.onnx")
    quant_pre_process(str(tmp_path / "f.onnx"), str(tmp_path / "p.onnx"))
    assert "ai.onnx.training" in {o.domain for o in onnx.load(tmp_path / "p.onnx").opset_import}

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rows = iter([{"x": rng.standard_normal((1, 8)).astype(np.float32)}] * 8)

        def get_next(self):
            return next(self.rows, None)

    q = tmp_path / "q.onnx"
    quantize_static(
        str(tmp_path / "p.onnx"),
        str(q),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    x = {"x": rng.standard_normal((1, 8)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **x)
    r = npuc("compile", q, "-o", tmp_path / "q.npu", "--report", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "r.json").read_text()
    if "reference_divergence" in report:
        assert "as written" in report and "use int8 x int8" not in report
    r = npuc("run", tmp_path / "q.npu", "--input", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "o.npz") as z:
        assert np.array_equal(z["y"], _ort_default(onnx.load(q), x)["y"])


def test_float16_under_the_float_reading_equals_ort_level_off():
    """ORT drops a Cast to float16 before an op it runs in float32 (with the cast back it
    inserts), even with optimisations off: hosting the nodes one by one would round where
    ORT does not. The float QDQ reading reads the graph ORT runs at level off."""
    from compiler.ir.semantics import run_graph
    from compiler.ort.reference_host import resolve_reference

    ref = resolve_reference("onnx-qdq-float")
    m = REPRODUCERS["float16"]()
    x = feeds(m)
    g, _ = to_ir(m, reference=ref)
    env = run_graph(g, x, reference=ref)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for o, want in zip([v.name for v in s.get_outputs()], s.run(None, x), strict=True):
        assert env[o].dtype == want.dtype and np.array_equal(env[o], want), o
