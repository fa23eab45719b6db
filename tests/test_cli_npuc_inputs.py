"""`npuc inputs`: the IN.npz a model expects, and the README's "check your own model" flow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from cli_helpers import assert_one_line_error, npuc
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "examples" / "digits"


def test_skeleton_names_shapes_dtypes(tmp_path):
    out = tmp_path / "in.npz"
    p = npuc(
        "inputs", str(DIGITS / "digits_matmul_qop_u8s8_pc.onnx"), "-o", str(out), "--batch", "7"
    )
    assert p.returncode == 0, p.stderr
    assert "symbolic" in p.stdout
    z = np.load(out)
    assert list(z.files) == ["input"]
    assert z["input"].shape == (7, 64) and z["input"].dtype == np.float32
    assert not z["input"].any()
    p = npuc("inputs", str(ROOT / "examples" / "showcase.onnx"), "-o", str(out))
    z = np.load(out)
    assert sorted(z.files) == ["X", "X4"] and z["X4"].shape == (4, 16) and z["X"].dtype == np.int8


def test_eight_bit_input_quantized_with_the_models_own_parameters(tmp_path):
    """matmul_sigmoid.onnx takes int8 X read by QLinearMatMul with scale 0.02, zp 0."""
    x = np.array([[-3.0, -0.2, -0.01, 0.01, 0.03, 0.05, 1.0, 3.0] * 2], dtype=np.float32)
    np.savez(tmp_path / "f.npz", X=x)
    out = tmp_path / "q.npz"
    p = npuc("inputs", str(ROOT / "examples" / "matmul_sigmoid.onnx"), "-o", str(out),
             "--from", str(tmp_path / "f.npz"))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "scale 0.0199999996 and zero point 0" in p.stdout
    q = np.load(out)["X"]
    assert q.dtype == np.int8
    # round half to even of x / 0.02 (0.01/0.02 = 0.5 -> 0, 0.03/0.02 = 1.5 -> 2), saturated
    want = np.clip(np.rint(x / np.float32(0.02)), -128, 127).astype(np.int8)
    assert np.array_equal(q, want)
    assert q[0, 0] == -128 and q[0, 7] == 127 and q[0, 2] == 0 and q[0, 3] == 0


def test_readme_flow_equals_onnx_runtime(tmp_path):
    """npuc inputs --from -> npuc compile -> npuc run on 360 digits: ORT's outputs, bit for bit."""
    model = DIGITS / "digits_gemm_qop_s8s8_pc.onnx"
    x = np.load(DIGITS / "digits_test.npz")["input"]
    np.savez(tmp_path / "float.npz", input=x)
    inp, prog, out = tmp_path / "in.npz", tmp_path / "p.npuprog", tmp_path / "out.npz"
    p = npuc("inputs", str(model), "-o", str(inp), "--from", str(tmp_path / "float.npz"))
    assert p.returncode == 0, p.stderr
    p = npuc(
        "compile", str(model), "-o", str(prog), "--proofs-mode", "off", "--reference", "ort-host",
        "--timeout", "120",  # a loaded machine must not turn a proof into unknown
    )  # fmt: skip
    assert p.returncode == 0 and "2 of 2 candidate fusions applied" in p.stdout, p.stdout + p.stderr
    p = npuc("run", str(prog), "--input", str(inp), "-o", str(out))
    assert p.returncode == 0, p.stderr
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )
    got = np.load(out)
    assert np.array_equal(got["label"], want[0]) and np.array_equal(got["probabilities"], want[1])


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    model = str(DIGITS / "digits_matmul_qop_u8s8_pc.onnx")
    np.savez(tmp_path / "wrong.npz", pixels=np.zeros((2, 64), np.float32))
    assert_one_line_error(
        npuc("inputs", model, "-o", str(tmp_path / "a.npz"), "--from", str(tmp_path / "wrong.npz")),
        "no array 'input'",
    )
    np.savez(tmp_path / "short.npz", input=np.zeros((2, 63), np.float32))
    assert_one_line_error(
        npuc("inputs", model, "-o", str(tmp_path / "a.npz"), "--from", str(tmp_path / "short.npz")),
        "shape [2, 63]",
    )
    np.savez(tmp_path / "ints.npz", input=np.zeros((2, 64), np.int32))
    assert_one_line_error(
        npuc("inputs", model, "-o", str(tmp_path / "a.npz"), "--from", str(tmp_path / "ints.npz")),
        "give float data",
    )
    assert_one_line_error(
        npuc("inputs", model, "-o", str(tmp_path / "a.npz"), "--dim", "n"), "NAME=SIZE"
    )
    # a symbolic dimension other than the leading one must be sized by name
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "width"])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "w.onnx")
    assert_one_line_error(
        npuc("inputs", str(tmp_path / "w.onnx"), "-o", str(tmp_path / "a.npz")), "--dim width=SIZE"
    )
    p = npuc("inputs", str(tmp_path / "w.onnx"), "-o", str(tmp_path / "a.npz"), "--dim", "width=5")
    assert p.returncode == 0 and np.load(tmp_path / "a.npz")["x"].shape == (1, 5)


def _two_readers(path: Path, second: tuple[float, int]) -> Path:
    """int8 X read by two QLinearMatMuls, `mm_a` with (0.02, 0) and `mm_b` with `second`."""
    from models import const, make, weights

    inits, nodes, outs = [], [], []
    for tag, (scale, zp) in (("a", (0.02, 0)), ("b", second)):
        inits += [
            const(f"W_{tag}", weights(8, 4, seed=len(tag)), "int8"),
            const(f"xs_{tag}", scale, "float32"),
            const(f"xz_{tag}", zp, "int8"),
            const(f"ws_{tag}", 0.01, "float32"),
            const(f"wz_{tag}", 0, "int8"),
            const(f"ys_{tag}", 0.05, "float32"),
            const(f"yz_{tag}", 0, "int8"),
        ]
        args = ["X", f"xs_{tag}", f"xz_{tag}", f"W_{tag}", f"ws_{tag}", f"wz_{tag}"]
        nodes.append(
            helper.make_node(
                "QLinearMatMul", [*args, f"ys_{tag}", f"yz_{tag}"], [f"Y_{tag}"], name=f"mm_{tag}"
            )
        )
        outs.append(helper.make_tensor_value_info(f"Y_{tag}", TensorProto.INT8, [2, 4]))
    x = helper.make_tensor_value_info("X", TensorProto.INT8, [2, 8])
    onnx.save(make(nodes, [x], outs, inits), path)
    return path


def test_an_input_read_with_conflicting_parameters_is_refused(tmp_path):
    model = _two_readers(tmp_path / "m.onnx", (0.03, 5))
    np.savez(tmp_path / "f.npz", X=np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    out = tmp_path / "q.npz"
    r = npuc("inputs", str(model), "-o", str(out), "--from", str(tmp_path / "f.npz"))
    assert_one_line_error(
        r,
        "input 'X'",
        "'mm_a' (QLinearMatMul) (scale 0.0199999996, zero point 0)",
        "'mm_b' (QLinearMatMul) (scale 0.0299999993, zero point 5)",
    )
    assert not out.exists()
    r = npuc("inputs", str(_two_readers(tmp_path / "z.onnx", (0.02, 3))), "-o", str(out),
             "--from", str(tmp_path / "f.npz"))  # fmt: skip
    assert_one_line_error(r, "'mm_b' (QLinearMatMul) (scale 0.0199999996, zero point 3)")


def test_an_input_read_by_two_ops_with_the_same_parameters_is_quantized(tmp_path):
    model = _two_readers(tmp_path / "m.onnx", (0.02, 0))
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    np.savez(tmp_path / "f.npz", X=x)
    out = tmp_path / "q.npz"
    r = npuc("inputs", str(model), "-o", str(out), "--from", str(tmp_path / "f.npz"))
    assert r.returncode == 0, r.stderr
    assert "scale 0.0199999996 and zero point 0" in r.stdout
    want = np.clip(np.rint(x / np.float32(0.02)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(np.load(out)["X"], want)
