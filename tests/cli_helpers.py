"""Run the real command-line tools in a subprocess (as users do) and small model builders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def run_cli(module: str, *args: str, cwd: Path | None = None, timeout: float = 300):
    """`python -m compiler.<module> args...`; returns the CompletedProcess (text mode)."""
    return subprocess.run(
        [sys.executable, "-m", f"compiler.{module}", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=str(cwd or REPO),
        timeout=timeout,
    )


def prover(*args: str, cwd: Path | None = None):
    """Run `prover ...`."""
    return run_cli("cli_prover", *args, cwd=cwd)


def npuc(*args: str, cwd: Path | None = None):
    """Run `npuc ...`."""
    return run_cli("cli_npuc", *args, cwd=cwd)


def assert_one_line_error(proc, *needles: str, code: int = 2) -> None:
    """Exit `code`, exactly one stderr line containing every needle, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def unsupported_op_model(path: Path) -> Path:
    """QLinearMatMul followed by an int8 Neg, which the frontend does not support."""
    w = numpy_helper.from_array(np.ones((4, 2), np.int8), "W")
    scalars = [
        numpy_helper.from_array(np.array(v, dtype=dt), n)
        for n, v, dt in [
            ("xs", 0.1, np.float32),
            ("xz", 0, np.int8),
            ("ws", 0.1, np.float32),
            ("wz", 0, np.int8),
            ("ys", 0.1, np.float32),
            ("yz", 0, np.int8),
        ]
    ]
    nodes = [
        helper.make_node(
            "QLinearMatMul", ["X", "xs", "xz", "W", "ws", "wz", "ys", "yz"], ["mm"], name="mm"
        ),
        helper.make_node("Neg", ["mm"], ["Y"], name="the_neg"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.INT8, [1, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.INT8, [1, 2])],
        [w, *scalars],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, path)
    return path


def unknown_domain_model(path: Path) -> Path:
    """The `unsupported_op_model` with its Neg in an opset domain nobody registers."""
    unsupported_op_model(path)
    m = onnx.load(path)
    m.graph.node[1].domain = "com.example"
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, path)
    return path
