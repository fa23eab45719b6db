"""Buffers larger than the target's memories: host fallback for a step, spilling between steps."""

from __future__ import annotations

import numpy as np
import onnx
from cli_helpers import assert_run_equals_ort, npuc
from models import matmul_activation

from npu_backend.buffers import memory_issues
from npu_backend.codegen import generate
from npu_backend.isa import DmaOut
from npu_backend.lowered import LoweredModel, NpuClip, TensorSpec
from npu_backend.program import Program
from npu_backend.simulator import run
from npu_backend.target import DEFAULT_TARGET, load_target

FLOAT = load_target()
SRAM = FLOAT.memory_size("sram")


def small_sram_target(tmp_path, size: int):
    text = DEFAULT_TARGET.read_text()
    old = f"[memories.sram]\nsize = {SRAM}\n"
    assert old in text
    p = tmp_path / "small.toml"
    p.write_text(text.replace(old, f"[memories.sram]\nsize = {size}\n"))
    return load_target(p)


def clip(name: str, x: str, out: str) -> NpuClip:
    return NpuClip(name, x, out, -10, 10, "int8")


def test_memory_issues_name_the_buffers_that_do_not_fit():
    st = clip("c", "x", "y")
    assert memory_issues(st, {"x": SRAM // 2, "y": SRAM // 2}, FLOAT) == []
    (issue,) = memory_issues(st, {"x": SRAM // 2, "y": SRAM // 2 + 1}, FLOAT)
    assert issue.code == "buffers_exceed_memory" and issue.step == "c"
    assert "'x'" in issue.message and f"sram of {SRAM} bytes" in issue.message


def test_codegen_spills_a_resident_tensor_when_the_next_step_needs_the_room(tmp_path):
    """x -> b, x -> c, b -> d: each step fits 128 bytes, but x, b and c together do not."""
    target = small_sram_target(tmp_path, 128)
    lowered = LoweredModel(
        [TensorSpec("x", "int8", (64,))],
        ["c", "d"],
        steps=[clip("c1", "x", "b"), clip("c2", "x", "c"), clip("c3", "b", "d")],
    )
    prog = generate(lowered, target)
    assert any(isinstance(i, DmaOut) and i.tensor == "b" for i in prog.instructions)
    x = np.arange(-32, 32, dtype=np.int8)
    outs, _ = run(prog, {"x": x})
    np.testing.assert_array_equal(outs["c"], np.clip(x, -10, 10))
    np.testing.assert_array_equal(outs["d"], np.clip(x, -10, 10))


def test_a_matmul_larger_than_sram_stays_on_the_host_and_the_rest_compiles(tmp_path):
    """x [200000, 16] and y [200000, 8] int8 need 4.8 MB of sram at once (4 MiB there)."""
    m = matmul_activation(K=16, N=8, M=200_000, double_activation=True)
    model = tmp_path / "big.onnx"
    onnx.save(m, model)
    prog = tmp_path / "big.npuprog"
    r = npuc("compile", model, "-o", prog)
    assert r.returncode == 0, r.stderr
    assert "stays on the host" in r.stderr and "sram" in r.stderr
    assert "0 of 2 candidate fusions applied" in r.stdout
    ops = [type(i).__name__ for i in Program.load(prog).instructions]
    assert "HostCall" in ops and "Activation" in ops  # the second activation runs on the NPU
    x = np.random.default_rng(0).integers(-128, 128, (200_000, 16)).astype(np.int8)
    inputs = {m.graph.input[0].name: x}
    np.savez(tmp_path / "in.npz", **inputs)
    assert_run_equals_ort(prog, tmp_path / "in.npz", model, inputs, tmp_path / "out.npz")
