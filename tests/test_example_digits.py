"""The shipped digits MLP (examples/digits): committed files, accuracy, and the kernels on it.

No scikit-learn needed: the models and the test split are committed. Each QOperator
model's QLinearAdd and QGemm nodes are checked against `prover.qlinear_binary` /
`prover.qgemm` on the real 360 test digits (intermediate tensors exposed as outputs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from test_ort_qgemm import HOST  # the host's u8s8 accumulation, probed once

from prover.inttypes import int_type
from prover.matmul import matmul_acc
from prover.qgemm import QGemmParams, qgemm
from prover.qlinear_binary import BinaryOp, QLinearBinaryParams, qlinear_binary
from prover.requant import onnx_requant_scale, requant_float_concrete

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits"
QUANTIZED = [
    f"digits_{kind}_{fmt}_{types}_{gran}.onnx"
    for kind in ("matmul", "gemm")
    for fmt in ("qop", "qdq")
    for types in ("u8s8", "s8s8")
    for gran in ("pt", "pc")
]
MODELS = ["digits_matmul_float.onnx", "digits_gemm_float.onnx", *QUANTIZED]


@pytest.fixture(scope="module")
def split() -> tuple[np.ndarray, np.ndarray]:
    d = np.load(DIGITS / "digits_test.npz")
    return d["input"], d["labels"]


def _session(model: onnx.ModelProto | Path, optimized: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def test_test_split(split):
    x, y = split
    assert x.dtype == np.float32 and x.shape == (360, 64)
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert y.shape == (360,) and set(np.unique(y)) == set(range(10))
    m = onnx.load(DIGITS / "digits_matmul_float.onnx")
    assert [i.name for i in m.graph.input] == ["input"]


@pytest.mark.parametrize("name", MODELS)
def test_accuracy(name, split):
    """Every model classifies the test digits (ORT at its defaults and with no optimisation)."""
    x, y = split
    for optimized in (True, False):
        labels = _session(DIGITS / name, optimized).run(["label"], {"input": x})[0].ravel()
        assert (labels == y).mean() >= 0.97, name


def _ops(name: str) -> list[str]:
    return [n.op_type for n in onnx.load(DIGITS / name).graph.node]


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantizer_output_structure(name):
    """The shapes of ORT's quantizer output the frontend has to accept."""
    ops = _ops(name)
    kind, fmt = name.split("_")[1:3]
    if fmt == "qop":
        want = "QGemm" if kind == "gemm" else "QLinearMatMul"
        assert ops.count(want) == 3 and ops.count("QLinearSigmoid") == 2
        assert ops.count("QLinearAdd") == (3 if kind == "matmul" else 0)
    else:
        assert ops.count("Gemm" if kind == "gemm" else "MatMul") == 3
        assert ops.count("Sigmoid") == 2
    m = onnx.load(DIGITS / name)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    w_scales = [v for k, v in inits.items() if k.startswith("coefficient") and k.endswith("_scale")]
    assert len(w_scales) == 3
    assert all((s.size > 1) == name.endswith("_pc.onnx") for s in w_scales)


def _exposed(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model with every node output as a graph output, and its initializers."""
    m = onnx.load(DIGITS / name)
    known = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in known:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
    return m, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def _scalar(v) -> float | int:
    return np.asarray(v).reshape(-1)[0].item()


@pytest.mark.parametrize("name", [n for n in QUANTIZED if "_qop_" in n])
def test_kernels_on_the_real_model(name, split):
    """QLinearAdd / QGemm / QLinearMatMul outputs on the test digits equal the kernel's."""
    m, inits = _exposed(name)
    s = _session(m, optimized=False)
    names = [o.name for o in s.get_outputs()]
    vals = dict(zip(names, s.run(None, {"input": split[0]}), strict=True))
    env = {**inits, **vals}
    checked = 0
    for n in m.graph.node:
        ins = [env.get(i) if i else None for i in n.input]
        got = vals[n.output[0]].astype(np.int64) if n.op_type != "Cast" else None
        if n.op_type == "QLinearAdd":
            a, a_s, a_z, b, b_s, b_z, c_s, c_z = ins
            p = QLinearBinaryParams(
                a_scale=_scalar(a_s), a_zp=_scalar(a_z), b_scale=_scalar(b_s), b_zp=_scalar(b_z),
                c_scale=_scalar(c_s), c_zp=_scalar(c_z), dtype=str(a.dtype),
            )  # fmt: skip
            want = qlinear_binary(BinaryOp.ADD, a, b, p)
        elif n.op_type == "QGemm":
            a, a_s, a_z, b, b_s, b_z, c, y_s, y_z = ins
            attrs = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
            p = QGemmParams(
                a_type=str(a.dtype), b_type=str(b.dtype), a_scale=_scalar(a_s), a_zp=_scalar(a_z),
                b_scale=tuple(np.ravel(b_s).tolist()), b_zp=tuple(np.ravel(b_z).tolist()),
                y_scale=_scalar(y_s), y_zp=_scalar(y_z), alpha=attrs.get("alpha", 1.0),
                trans_a=bool(attrs.get("transA", 0)), trans_b=bool(attrs.get("transB", 0)),
            )  # fmt: skip
            want = qgemm(a, b, p, c, profile=HOST)
        elif n.op_type == "QLinearMatMul" and HOST == "onnx":
            a, a_s, a_z, b, b_s, b_z, y_s, y_z = ins
            acc = matmul_acc(a, b, _scalar(a_z), np.ravel(b_z) if np.size(b_z) > 1 else b_z)
            scale = onnx_requant_scale(a_s, np.ravel(b_s).astype(np.float32), y_s)
            want = requant_float_concrete(acc, scale, _scalar(y_z), int_type(str(y_z.dtype)))
        else:
            continue
        assert got.shape == want.shape
        assert (got == want).all(), f"{name}: node {n.name} ({n.op_type}) differs from ORT"
        checked += 1
    assert checked >= 3


@pytest.mark.slow
def test_script_rebuilds_the_committed_files(tmp_path, monkeypatch):
    """make_digits.py --check: the committed files are what the script builds (same versions)."""
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_digits", DIGITS / "make_digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.check() == 0
    for p in DIGITS.iterdir():
        if p.suffix in (".onnx", ".npz"):
            (tmp_path / p.name).write_bytes(p.read_bytes())
    stale = tmp_path / "digits_gemm_qop_u8s8_pc.onnx"
    stale.write_bytes(stale.read_bytes()[:-1] + b"\x00")
    monkeypatch.setattr(mod, "HERE", tmp_path)
    assert mod.check() == 1
