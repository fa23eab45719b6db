"""Every op fits sram alone, the free bytes are enough, but not in one range (issue 28 #11).

QLinearMatMul (X 512 B -> H 1536 B) -> Clip (H -> Y 1536 B) with 3072 B of sram: placed
first-fit, H lands above X, and once X is freed the 3072 - 1536 free bytes are two holes
of 512 and 1024, too small for Y ("CodegenError: sram exhausted", exit 4). Codegen now
plans addresses by liveness (`npu_backend.sram_plan`), and moves an input whose place
leaves no room for its output (the step's two buffers always fit together: lowering
checks that, and keeps a step whose buffers do not fit on the host).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from cli_helpers import assert_run_equals_ort, npuc
from models import const, make, weights
from onnx import TensorProto as TP
from onnx import helper as oh

from compiler.api import compile_model
from compiler.ort.tables import ort_outputs
from npu_backend import sram_plan
from npu_backend.buffers import memory_issues
from npu_backend.codegen import generate
from npu_backend.lowered import LoweredModel, NpuClip, NpuMatMul, NpuRequant, TensorSpec
from npu_backend.postprocess import RequantParams
from npu_backend.program import Program
from npu_backend.simulator import run
from npu_backend.target import DEFAULT_TARGET, load_target

M, K, N = 16, 32, 96  # X 512 bytes, H and Y 1536 bytes each


def mm_clip() -> onnx.ModelProto:
    inits = [
        const("W", weights(K, N), "int8"),
        const("xs", 0.02, "float32"),
        const("z", 0, "int8"),
        const("ws", 0.01, "float32"),
        const("ys", 0.05, "float32"),
        const("lo", -20, "int8"),
        const("hi", 50, "int8"),
    ]
    qargs = ["X", "xs", "z", "W", "ws", "z", "ys", "z"]
    nodes = [
        oh.make_node("QLinearMatMul", qargs, ["H"], name="mm"),
        oh.make_node("Clip", ["H", "lo", "hi"], ["Y"], name="clip"),
    ]
    x = oh.make_tensor_value_info("X", TP.INT8, [M, K])
    y = oh.make_tensor_value_info("Y", TP.INT8, [M, N])
    return make(nodes, [x], [y], inits)


def sram_target(tmp_path, size: int):
    text = DEFAULT_TARGET.read_text()
    old = "[memories.sram]\nsize = 4194304\n"
    assert old in text
    p = tmp_path / f"sram{size}.toml"
    p.write_text(text.replace(old, f"[memories.sram]\nsize = {size}\n"))
    return p


def _inputs() -> dict[str, np.ndarray]:
    return {"X": np.random.default_rng(1).integers(-128, 128, (M, K)).astype(np.int8)}


@pytest.mark.parametrize("strategy", ["early", "alternatives", "late"])
def test_ops_that_fit_alone_compile_together_and_equal_onnx_runtime(tmp_path, strategy):
    model = tmp_path / "m.onnx"
    onnx.save(mm_clip(), model)
    prog, report = tmp_path / "p.npuprog", tmp_path / "r.json"
    r = npuc(
        "compile", model, "-o", prog, "--target", sram_target(tmp_path, 3072), "--report", report,
        "--schedule-strategy", strategy, "--no-progress",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "stays on the host" not in r.stderr
    ops = [type(i).__name__ for i in Program.load(prog).instructions]
    assert "MatMul" in ops and "Clip" in ops and "HostCall" not in ops
    assert not json.loads(report.read_text()).get("host_ops")
    np.savez(tmp_path / "in.npz", **_inputs())
    assert_run_equals_ort(prog, tmp_path / "in.npz", model, _inputs(), tmp_path / "out.npz")


def test_the_plan_places_the_output_where_the_dead_input_was():
    lowered = LoweredModel(
        [TensorSpec("x", "int8", (512,))],
        ["z"],
        steps=[NpuClip("a", "x", "y", -5, 5, "int8"), NpuClip("b", "y", "z", -5, 5, "int8")],
    )
    sizes = {"x": 512, "y": 1536, "z": 1536}
    assert sram_plan.lifetimes(lowered.steps, frozenset()) == {
        "x": (0, 0),
        "y": (0, 1),
        "z": (1, 1),
    }
    p = sram_plan.plan(lowered.steps, sizes, 3072, frozenset())
    assert p["y"] == 0 and p["x"] == p["z"] == 1536  # x and z are never live together
    assert sram_plan.plan(lowered.steps, sizes, 2048, frozenset()) == {"y": 0, "x": 1536}


def test_without_a_plan_the_input_is_moved_instead_of_failing(tmp_path, monkeypatch):
    """The guarantee does not rest on the plan: first-fit alone, the Clip's input is
    stored to dram and loaded again at the bottom of an emptied sram."""
    target = load_target(sram_target(tmp_path, 3072))
    result = compile_model(mm_clip(), "bitwise", target)
    monkeypatch.setattr(sram_plan, "plan", lambda *a: {})
    prog = generate(result.lowered, target)
    ins = [(type(i).__name__, getattr(i, "tensor", None)) for i in prog.instructions]
    assert ("DmaOut", "H") in ins and ins.count(("DmaIn", "H")) == 1
    got, _ = run(prog, _inputs())
    want = ort_outputs_of(mm_clip(), tmp_path)
    np.testing.assert_array_equal(got["Y"], want["Y"])


def ort_outputs_of(model: onnx.ModelProto, tmp_path) -> dict[str, np.ndarray]:
    p = tmp_path / "ref.onnx"
    onnx.save(model, p)
    return ort_outputs(p, _inputs())


@pytest.mark.parametrize(("size", "host"), [(2048, ["clip"]), (1024, ["mm", "clip"])])
def test_a_tighter_sram_keeps_the_ops_on_the_host_with_a_diagnostic(tmp_path, size, host):
    model = tmp_path / "m.onnx"
    onnx.save(mm_clip(), model)
    prog, report = tmp_path / "p.npuprog", tmp_path / "r.json"
    r = npuc(
        "compile", model, "-o", prog, "--target", sram_target(tmp_path, size), "--report", report,
        "--no-progress",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    diags = json.loads(report.read_text())["host_ops"]
    on_host = [n for d in diags if d["code"] == "buffers_exceed_memory" for n in d["nodes"]]
    assert sorted(on_host) == sorted(host), diags
    for name in host:
        assert f"{name} stays on the host: its sram buffers" in r.stderr
    np.savez(tmp_path / "in.npz", **_inputs())
    assert_run_equals_ort(prog, tmp_path / "in.npz", model, _inputs(), tmp_path / "out.npz")


def test_weights_and_bias_are_reloaded_when_wmem_is_in_pieces(tmp_path):
    """wmem 512 B: mm1 loads w1 [0, 128) and b1 [128, 192), mm2 w3 [192, 320); mm3 needs
    w3 (resident) and b3 (320 B): 448 B fit, but the holes are 192 B each."""
    text = DEFAULT_TARGET.read_text()
    old = "[memories.wmem]\nsize = 2097152\n"
    assert old in text
    (tmp_path / "w.toml").write_text(text.replace(old, "[memories.wmem]\nsize = 512\n"))
    target = load_target(tmp_path / "w.toml")
    rng = np.random.default_rng(0)
    consts = {
        "w1": rng.integers(-128, 128, (8, 16)).astype(np.int8),
        "b1": rng.integers(-1000, 1000, 16).astype(np.int32),
        "w3": rng.integers(-128, 128, (1, 80)).astype(np.int8),
        "b3": rng.integers(-1000, 1000, 80).astype(np.int32),
    }

    def mm(name, a, w, bias, out):
        return NpuMatMul(name=name, a=a, w=w, out=out, a_zp=0, w_zp=0, bias=bias,
                         a_type="int8", w_type="int8")  # fmt: skip

    lowered = LoweredModel(
        [TensorSpec("x1", "int8", (1, 8)), TensorSpec("x2", "int8", (1, 1))],
        ["y1", "y2", "y3"],
        steps=[
            mm("mm1", "x1", "w1", "b1", "y1"),
            mm("mm2", "x2", "w3", None, "y2"),
            mm("mm3", "x2", "w3", "b3", "y3"),
        ],  # fmt: skip
        constants=consts,
    )
    prog = generate(lowered, target)
    loads = [i.tensor for i in prog.instructions if type(i).__name__ == "DmaIn" and i.dst == "wmem"]
    assert loads == ["w1", "b1", "w3", "w3", "b3"]  # w3 loaded again beside b3
    x = {"x1": rng.integers(-128, 128, (1, 8)).astype(np.int8), "x2": np.array([[7]], np.int8)}
    got, _ = run(prog, x)
    w = {k: v.astype(np.int64) for k, v in consts.items()}
    np.testing.assert_array_equal(got["y1"], x["x1"].astype(np.int64) @ w["w1"] + w["b1"])
    np.testing.assert_array_equal(got["y2"], 7 * w["w3"])
    np.testing.assert_array_equal(got["y3"], 7 * w["w3"] + w["b3"])


def _random_chain(rng) -> tuple[LoweredModel, dict[str, int]]:
    """x [8, 16] int8 through 2-8 steps: raw MatMuls (int32, 8-96 columns) each requantized
    to int8, and Clips, each reading an earlier int8 tensor; (model, bytes per tensor)."""
    m = 8
    cols, kinds, steps, consts = {"x": 16}, {"x": "int8"}, [], {}
    for i in range(int(rng.integers(2, 9))):
        src = [k for k in cols if kinds[k] == "int8"]
        s = src[int(rng.integers(0, len(src)))]
        if rng.random() < 0.4:
            n = int(rng.choice([8, 16, 32, 64, 96]))
            consts[f"w{i}"] = rng.integers(-5, 5, (cols[s], n)).astype(np.int8)
            steps.append(NpuMatMul(name=f"m{i}", a=s, w=f"w{i}", out=f"a{i}", a_zp=0, w_zp=0,
                                   bias=None, a_type="int8", w_type="int8"))  # fmt: skip
            rq = RequantParams("float32", 0, "int8", scale=0.01)
            steps.append(NpuRequant(f"r{i}", f"a{i}", f"t{i}", rq))
            cols[f"a{i}"], kinds[f"a{i}"] = n, "int32"
        else:
            steps.append(NpuClip(f"c{i}", s, f"t{i}", -10, 10, "int8"))
        cols[f"t{i}"], kinds[f"t{i}"] = cols[f"a{i}"] if f"a{i}" in cols else cols[s], "int8"
    outs = [st.out for st in steps if kinds[st.out] == "int8" and rng.random() < 0.4]
    lowered = LoweredModel(
        [TensorSpec("x", "int8", (m, 16))], outs or [steps[-1].out], steps=steps, constants=consts
    )
    return lowered, {k: m * c * (4 if kinds[k] == "int32" else 1) for k, c in cols.items()}


@pytest.mark.parametrize("planned", [True, False])
def test_every_step_that_fits_alone_gets_its_buffers(tmp_path, monkeypatch, planned):
    """Random chains and a small sram: whenever each step's own buffers fit
    (`memory_issues`, what lowering checks), codegen succeeds and computes what the same
    model computes with plenty of sram; with the plan, and on relocation alone."""
    if not planned:
        monkeypatch.setattr(sram_plan, "plan", lambda *a: {})
    targets = [load_target(sram_target(tmp_path, s)) for s in (1024, 1536, 2048, 3072)]
    rng, roomy, checked = np.random.default_rng(0), load_target(), 0
    for _ in range(300):
        lowered, sizes = _random_chain(rng)
        target = targets[int(rng.integers(0, len(targets)))]
        if any(memory_issues(st, sizes, target) for st in lowered.steps):
            continue
        x = {"x": rng.integers(-128, 128, (8, 16)).astype(np.int8)}
        got, _ = run(generate(lowered, target), x)
        want, _ = run(generate(lowered, roomy), x)
        for name in lowered.outputs:
            np.testing.assert_array_equal(got[name], want[name])
        checked += 1
    assert checked >= 120
