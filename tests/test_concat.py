"""com.microsoft QLinearConcat on the NPU, equal to ORT bit for bit: each input whose scale
or zero point differ from the output's goes through ORT's requantization table (a `lut` of
function `identity`, proven against the target's own table, or fused into the conv before
it), then one NPU concat; after NPU convs the join happens in their channels-last layout."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pool_models import fire, qconcat
from sim_helpers import corrupt_npu_results

from compiler.api import compile_model
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import HostOnnx, NpuConcat, NpuLut, NpuMove
from npu_backend.target import load_target

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")
NO_MOVES = dataclasses.replace(FLOAT, standalone=dataclasses.replace(FLOAT.standalone, moves=False))


def _feeds(m, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        dt = np.int8 if i.type.tensor_type.elem_type == 3 else np.uint8
        info = np.iinfo(dt)
        if seed == 2:
            out[i.name] = rng.choice([info.min, info.max], size=shape).astype(dt)
        else:
            out[i.name] = rng.integers(info.min, info.max + 1, size=shape).astype(dt)
    return out


def _check_equal(m, target=FLOAT):
    r = compile_model(m, "bitwise", target)
    prog = codegen.generate(r.lowered, target)
    for seed in range(3):
        inp = _feeds(m, seed)
        ref = session(m, level="default").run(None, inp)[0]
        np.testing.assert_array_equal(ref, run_graph(r.original, inp)["y"])
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])
    return r


CASES = {
    "s8_two_scales": dict(),
    "u8_zp_extremes": dict(dtype="uint8", params=((0.02, 255), (0.05, 0)), y=(0.01, 128)),
    "s8_zp_extremes": dict(params=((0.5, 127), (0.003, -128)), y=(0.25, -128)),
    "last_axis": dict(axis=-1, shapes=((1, 3, 4, 5), (1, 3, 4, 2))),
    "axis0_three": dict(
        axis=0, shapes=((1, 2, 3), (2, 2, 3), (1, 2, 3)), params=((0.02, 3), (0.05, -7), (1.0, 0))
    ),
    # input 0 has the output's parameters: copied, no table
    "one_copy": dict(params=((0.03, 1), (0.05, -7))),
    # half steps: x_scale / y_scale = 1/2 exactly
    "half_steps": dict(params=((0.5, 0), (0.25, 0)), y=(1.0, 0)),
}


@pytest.mark.parametrize(
    "name",
    [
        n if n in ("s8_two_scales", "u8_zp_extremes") else pytest.param(n, marks=pytest.mark.slow)
        for n in CASES
    ],
)
def test_qlinear_concat_on_the_npu_equals_onnxruntime(name):
    r = _check_equal(qconcat(**CASES[name]))
    kinds = [type(s) for s in r.lowered.steps]
    assert kinds[-1] is NpuConcat and set(kinds[:-1]) <= {NpuLut}, kinds
    assert not r.diagnostics


def test_identical_parameters_are_copied_without_a_table():
    g, _ = to_ir(qconcat(params=((0.03, 1), (0.05, -7))))
    assert [n.op for n in g.nodes] == ["lut", "concat"]
    assert g.nodes[0].inputs == ["x1"]


def test_fire_module_joins_in_the_npu_layout():
    r = _check_equal(fire())
    moves = [s for s in r.lowered.steps if isinstance(s, NpuMove)]
    assert len(moves) == 2, [type(s).__name__ for s in r.lowered.steps]  # in and out only
    (cat,) = [s for s in r.lowered.steps if isinstance(s, NpuConcat)]
    assert cat.axis == 3  # channels-last
    assert all(str(s.verdict) == "proven" for s in r.sites) and len(r.sites) == 2
    assert not [s for s in r.lowered.steps if isinstance(s, HostOnnx)]


@pytest.mark.slow
def test_concat_without_a_data_movement_unit_stays_on_the_host_named():
    r = _check_equal(qconcat(), NO_MOVES)
    assert isinstance(r.lowered.steps[-1], HostOnnx)
    assert {d.code.value for d in r.diagnostics} == {"unsupported_op"}
    r = _check_equal(fire(), FIXED)  # fixed-point requantization refuted: host, named
    assert {"refuted"} <= {d.code.value for d in r.diagnostics}


def test_corrupted_concat_is_caught(monkeypatch):
    m = qconcat()
    r = compile_model(m, "bitwise", FLOAT)
    prog = codegen.generate(r.lowered, FLOAT)
    inp = _feeds(m, 0)
    ref = session(m).run(None, inp)[0]
    corrupt_npu_results(monkeypatch)
    assert not np.array_equal(ref, simulator.run(prog, inp)[0]["y"])


@pytest.mark.slow
def test_fire_module_and_pools_through_npuc_compile_and_run_equal_onnxruntime(tmp_path):
    import onnx
    from cli_helpers import assert_run_equals_ort, npuc
    from pool_models import conv_chain

    for name, m in (
        ("fire", fire()),
        ("chain", conv_chain(("3x3", "mp"), pool=True, flatten=True)),
    ):
        path = tmp_path / f"{name}.onnx"
        onnx.save(m, path)
        prog = tmp_path / f"{name}.npu"
        p = npuc("compile", str(path), "-o", str(prog), "--proofs-mode", "off", "--no-progress")
        assert p.returncode == 0, p.stderr
        inputs = _feeds(m, 1)
        np.savez(tmp_path / "in.npz", **inputs)
        assert_run_equals_ort(prog, tmp_path / "in.npz", path, inputs, tmp_path / "out.npz")
