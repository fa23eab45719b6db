"""QLinearConv on an emulated AVX2-only CPU (`qemu-x86_64 -cpu Haswell`: no VNNI).

Slow (about a minute) and skipped where qemu-user is absent. On the CPU where ORT sums
uint8 x int8 pairs with int16 saturation it checks what the default suite cannot: s8s8,
u8u8 and 7-bit-weight u8s8 convs (3x3, depthwise, grouped, zero points at the extremes)
equal the exact meaning, so they run on the NPU under `ort-host`; a full-range u8s8 3x3
conv does not (its pairs saturate), so under `ort-host` (= `ort-x86-avx2`) it stays on
the host; every compiled program equals ORT's default session there; and a refuted site
replayed under the exact reference in a model that also holds such a saturable conv
reproduces against ORT (the IR has no meaning for that conv under this CPU's profile: it
was an uncaught CompilerError).
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
def test_avx2_only_cpu_convs_exact_except_full_range_u8s8():
    p = subprocess.run(
        [QEMU, "-cpu", "Haswell", sys.executable, str(HERE / "qemu_conv_probe.py")],
        capture_output=True,
        text=True,
        cwd=str(HERE),
        env={"PYTHONPATH": f"{HERE.parent}:{HERE}", "PATH": "/usr/bin:/bin"},
        timeout=1800,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["host"] == "ort-host=ort-x86-avx2"
    for name, c in out["counts"].items():
        assert c["outputs"] >= 500, name
        if name == "u8s8_3x3":
            assert c["default"] > c["outputs"] // 10 and c["off"] > c["outputs"] // 10, c
        else:
            assert c["default"] == c["off"] == 0, (name, c)
    for name, c in out["compiled"].items():
        assert c["equal"], name
        assert c["on_npu"] == (name != "u8s8_3x3"), (name, c)
    replay = out["refuted_replay"]
    assert replay["verdict"] == "refuted" and replay["expected_by"] is not None, replay
