"""The CLIs end without interpreter teardown (`compiler.cli.fast_exit`): output files, the
exit code, stderr and the atexit handlers (the phase recorder) all as before. Under -m slow:
two fresh processes; the default suite's CLI subprocess tests (test_cli_startup,
test_cli_run_record, test_cli_prover) take the same `__main__` path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "compiler.cli.prover", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_a_check_writes_its_report_and_phases_then_exits_with_its_code(tmp_path):
    out, phases = tmp_path / "r.json", tmp_path / "phases.json"
    p = _run("check", "examples/matmul_sigmoid.onnx", "--proofs-mode", "off", "--no-progress",
             "--format", "json", "-o", str(out), env={"NPU_PHASES": str(phases)})  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["sites"][0]["verdict"] == "proven"
    assert json.loads(phases.read_text())["phases"]["prove"] >= 0


@pytest.mark.slow
def test_bad_input_still_exits_2_with_its_message(tmp_path):
    p = _run("check", str(tmp_path / "missing.onnx"))
    assert p.returncode == 2 and "model file not found" in p.stderr
