"""ONNX Runtime on an emulated AVX2-only CPU (`qemu-x86_64 -cpu Haswell`: no VNNI).

Slow (about 15 s) and skipped where qemu-user is absent. It checks on a CPU whose ORT
saturates uint8 x int8 pairs what the default suite can only check on this host: the
pair-saturating model matches ORT with 0 mismatches and exact accumulation does not,
`ort-host` resolves to `ort-x86-avx2`, and a saturable site under `ort-host` is refuted
with ONNX Runtime itself confirming the expected output.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
QEMU = shutil.which("qemu-x86_64")
HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(
    QEMU is None or platform.machine().lower() not in ("x86_64", "amd64"),
    reason="needs qemu-x86_64 (apt-get install qemu-user) on an x86-64 host",
)
def test_avx2_only_cpu_matches_the_pair_saturating_profile():
    p = subprocess.run(
        [QEMU, "-cpu", "Haswell", sys.executable, str(HERE / "qemu_u8s8_probe.py")],
        capture_output=True,
        text=True,
        cwd=str(HERE),
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["host"] == "ort-host=ort-x86-avx2"
    for op, c in out["counts"].items():
        assert c["outputs"] >= 100, op
        assert c["pair_mismatch"] == 0, (op, c)
        assert c["exact_mismatch"] > c["outputs"] // 4, (op, c)
    check = out["ort_host_check"]
    assert check["verdict"] == "refuted" and check["expected_by"] == "onnxruntime"
