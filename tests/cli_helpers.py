"""Run the real command-line tools in their own process (as users do) and small model builders."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


# Set to 1 to start every command as a fresh `python -m` (slower; for debugging the runner).
FRESH_ENV = "NPU_TESTS_FRESH_PROCESS"


class _ForkServer:
    """One `fork_runner.py --serve` per test session: each command runs in its own process
    forked from it (the tools imported once; ~0.1 instead of ~0.45 s of CPU per command)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None

    def run(self, job: dict) -> dict:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__).with_name("fork_runner.py")), "--serve"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=REPO,
                )
                atexit.register(self.proc.stdin.close)
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died; rerun with NPU_TESTS_FRESH_PROCESS=1")
        return json.loads(line)


_SERVER = _ForkServer()
# CPU seconds of the commands run through the fork server (the driver is reaped only at
# exit, so its children's time is not in this process's RUSAGE_CHILDREN until then).
SERVER_CPU = [0.0]


def run_cli(module: str, *args: str, cwd: Path | None = None, timeout: float = 300):
    """`python -m compiler.<module> args...` in its own process; a CompletedProcess (text).

    The process is forked from a driver that imported the tools once (`fork_runner`),
    with this process's environment, `cwd` and stdin from /dev/null; a command that
    outlives `timeout` is killed (returncode -14).
    """
    argv = [str(a) for a in args]
    cmd = [sys.executable, "-m", f"compiler.{module}", *argv]
    if os.environ.get(FRESH_ENV) == "1":
        return subprocess.run(
            cmd, capture_output=True, text=True, cwd=str(cwd or REPO), timeout=timeout
        )
    r = _SERVER.run(
        {
            "module": f"compiler.{module}",
            "argv": argv,
            "cwd": str(cwd or REPO),
            "env": dict(os.environ),
            "timeout": timeout,
        }
    )
    SERVER_CPU[0] += r["cpu"]
    return subprocess.CompletedProcess(cmd, r["returncode"], r["stdout"], r["stderr"])


def prover(*args: str, cwd: Path | None = None):
    """Run `prover ...`."""
    return run_cli("cli.prover", *args, cwd=cwd)


def npuc(*args: str, cwd: Path | None = None):
    """Run `npuc ...`."""
    return run_cli("cli.npuc", *args, cwd=cwd)


def assert_run_equals_ort(prog: Path, in_npz: Path, model: Path, inputs: dict, out: Path) -> None:
    """`npuc run prog --input in_npz -o out` succeeds and every ONNX Runtime output of
    `model` on `inputs` equals the program's bitwise."""
    from compiler.ort.tables import ort_outputs  # keeps this module free of ORT

    ran = npuc("run", prog, "--input", in_npz, "-o", out)
    assert ran.returncode == 0, ran.stderr
    want = ort_outputs(model, inputs)
    with np.load(out) as got:
        for name, w in want.items():
            np.testing.assert_array_equal(got[name], w, err_msg=name)


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
