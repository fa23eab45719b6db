"""examples/check_your_model.py (the README's "Check your own model"): export, quantize, check.

The default path (the shipped float digits MLP, calibrated on the shipped digits) needs no
optional dependency; the torch and scikit-learn exports skip, saying which package is missing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "check_your_model.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_your_model", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _quantized_ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def test_default_path_quantizes_the_shipped_float_model_and_proves_its_sites(tmp_path, capsys):
    out = tmp_path / "model_q.onnx"
    assert _script().main(["-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 candidates: 2 proven" in text
    assert {"QuantizeLinear", "DequantizeLinear"} <= _quantized_ops(out)  # QDQ by default


@pytest.mark.slow  # a second quantization; the default run keeps the QDQ one
def test_qoperator_per_channel(tmp_path, capsys):
    out = tmp_path / "q.onnx"
    assert _script().main(["--format", "qop", "--per-channel", "-o", str(out)]) == 0
    assert "QGemm" in _quantized_ops(out) and "2 proven" in capsys.readouterr().out


def test_input_name_is_read_from_the_model_and_calibration_keyed_by_it(tmp_path, capsys):
    """A float model whose input is not called 'input': its rows are found by its own name."""
    m = onnx.load(str(ROOT / "examples" / "digits" / "digits_gemm_float.onnx"))
    for n in m.graph.node:
        n.input[:] = ["pixels" if i == "input" else i for i in n.input]
    m.graph.input[0].name = "pixels"
    onnx.save(m, str(tmp_path / "f.onnx"))
    rows = np.load(ROOT / "examples" / "digits" / "digits_test.npz")["input"][:50]
    np.savez(tmp_path / "rows.npz", pixels=rows, other=rows[:1])
    mod = _script()
    assert mod.input_name(tmp_path / "f.onnx") == "pixels"
    args = ["--float", str(tmp_path / "f.onnx"), "--calibration", str(tmp_path / "rows.npz")]
    assert mod.main([*args, "-o", str(tmp_path / "q.onnx")]) == 0
    assert "calibrated on 50 rows" in capsys.readouterr().out


def test_calibration_without_the_inputs_array_is_a_one_line_error(tmp_path):
    np.savez(tmp_path / "rows.npz", a=np.zeros((2, 64), np.float32), b=np.zeros(2))
    with pytest.raises(SystemExit, match="no array named 'input'"):
        _script().calibration_rows(tmp_path / "rows.npz", "input")


def test_torch_export(tmp_path, capsys):
    pytest.importorskip("torch", reason="torch is not installed (the --export torch path)")
    out = tmp_path / "t_q.onnx"
    assert _script().main(["--export", "torch", "-o", str(out)]) == 0
    assert (tmp_path / "t_q_float.onnx").is_file() and "1 proven" in capsys.readouterr().out


def test_sklearn_export(tmp_path, capsys):
    for module in ("sklearn", "skl2onnx"):
        pytest.importorskip(
            module, reason=f"{module} is not installed (pip install -e '.[examples]')"
        )
    out = tmp_path / "s_q.onnx"
    assert _script().main(["--export", "sklearn", "-o", str(out)]) == 0
    assert "proven" in capsys.readouterr().out


def test_missing_export_dependency_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "skl2onnx", None)
    mod = _script()
    for kind in ("torch", "sklearn"):
        assert mod.main(["--export", kind, "-o", str(tmp_path / "x.onnx")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: --export {kind} needs") and "\n" not in err


@pytest.mark.slow  # a fresh interpreter (~4 s); the default run calls main() in-process
def test_readme_command_runs_as_written(tmp_path):
    r = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "model_q.onnx").is_file()
