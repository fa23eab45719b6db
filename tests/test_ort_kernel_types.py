"""QLinearMatMul / QLinearConv / QGemm type combinations ONNX Runtime has no kernel for
(fuzzer finding 1): exit 2 naming the node and the (a, b, y) types, never verdicts or exit 4.

`ORT_QLINEAR_TYPES` is checked against this ONNX Runtime by trying every combination.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from cli_helpers import assert_one_line_error, npuc, prover
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from compiler.errors import FrontendError
from compiler.frontend.reader import ORT_QLINEAR_TYPES, to_ir

TYPES = {"uint8": TP.UINT8, "int8": TP.INT8}
COMBOS = list(itertools.product(TYPES, repeat=3))


def _scalars(a: str, b: str, y: str) -> list:
    return [
        nh.from_array(np.array(v, dtype=t), name)
        for name, v, t in [
            ("as", 0.1, np.float32), ("az", 0, a), ("ws", 0.05, np.float32),
            ("wz", 0, b), ("ys", 0.2, np.float32), ("yz", 0, y),
        ]
    ]  # fmt: skip


def _model(op: str, a: str, b: str, y: str):
    ins = ["x", "as", "az", "W", "ws", "wz"]
    if op == "QLinearMatMul":
        w, xs, ys, node = np.ones((4, 3), b), [2, 4], [2, 3], oh.make_node(op, [*ins, "ys", "yz"], ["o"], name="n")  # fmt: skip
    elif op == "QLinearConv":
        w, xs, ys = np.ones((3, 4, 1, 1), b), [1, 4, 2, 2], [1, 3, 2, 2]
        node = oh.make_node(op, [*ins, "ys", "yz"], ["o"], name="n")
    else:
        w, xs, ys = np.ones((4, 3), b), [2, 4], [2, 3]
        node = oh.make_node(op, [*ins, "", "ys", "yz"], ["o"], name="n", domain="com.microsoft")
    g = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TYPES[a], xs)],
        [oh.make_tensor_value_info("o", TYPES[y], ys)],
        [nh.from_array(w, "W"), *_scalars(a, b, y)],
    )
    opsets = [oh.make_opsetid("", 20), oh.make_opsetid("com.microsoft", 1)]
    m = oh.make_model(g, opset_imports=opsets[: 2 if op == "QGemm" else 1])
    m.ir_version = 10
    return m, {"x": np.ones(xs, a)}


def _ort_runs(m, feeds) -> bool:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        s.run(None, feeds)
    except Exception:  # noqa: BLE001 - any refusal: no kernel
        return False
    return True


@pytest.mark.parametrize("op", ["QLinearMatMul", "QLinearConv", "QGemm"])
def test_kernel_list_is_what_ort_runs(op):
    runs = {c for c in COMBOS if _ort_runs(*_model(op, *c))}
    assert runs == set(ORT_QLINEAR_TYPES)


@pytest.mark.parametrize("op", ["QLinearMatMul", "QLinearConv", "QGemm"])
@pytest.mark.parametrize("combo", COMBOS, ids="-".join)
def test_frontend_accepts_exactly_the_kernel_list(op, combo):
    m, _ = _model(op, *combo)
    if combo in ORT_QLINEAR_TYPES:
        to_ir(m)
    else:
        with pytest.raises(FrontendError, match=rf"node 'n' \({op}\).*\({', '.join(combo)}\)"):
            to_ir(m)


def test_int8_by_uint8_qlinear_matmul_is_exit_2(tmp_path):
    """Was: `prover check` exit 4 on a refuted site, `npuc compile` exit 4 on the host op."""
    m, _ = _model("QLinearMatMul", "int8", "uint8", "int8")
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    want = ("node 'n' (QLinearMatMul)", "(int8, uint8, int8)")
    assert_one_line_error(prover("check", p, "--proofs-mode", "off", "--no-progress"), *want)
    r = npuc("compile", p, "-o", tmp_path / "p.npuprog", "--proofs-mode", "off")
    assert_one_line_error(r, *want)
