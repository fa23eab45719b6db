"""QLinearConv over any window (kernel, strides, dilations, pads, auto_pad, groups, 1-D):
the IR meaning, the compiled program run in the simulator, and ONNX Runtime's default
session (which may run its NHWC com.microsoft QLinearConv) agree bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_models import conv_inputs, conv_integer, qconv, qdq_conv

from compiler.api import compile_model
from compiler.errors import CompilerError
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.reference_host import host_profile
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import NpuMatMul
from npu_backend.target import load_target
from prover.reference import Accumulation, get_profile

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")

CASES = {
    "3x3": dict(),
    "stride2_pads": dict(strides=(2, 2), pads=(1, 1, 1, 1)),
    "asym_pads": dict(pads=(2, 0, 1, 3)),
    "dilation": dict(dilations=(2, 1), pads=(1, 0, 2, 1)),
    "same_upper": dict(auto_pad="SAME_UPPER", strides=(2, 2), spatial=(8, 7)),
    "same_lower": dict(auto_pad="SAME_LOWER", kernel=(2, 2)),
    "valid": dict(auto_pad="VALID", kernel=(3, 2)),
    "depthwise": dict(C_in=6, C_out=6, group=6, pads=(1, 1, 1, 1)),
    "depthwise_mult2": dict(C_in=3, C_out=6, group=3, strides=(2, 1)),
    "grouped": dict(C_in=4, C_out=6, group=2, pads=(0, 1, 0, 1), per_channel=True, bias=True),
    "x_zp_min": dict(x_zp=-128, pads=(1, 1, 1, 1), bias=True),
    "x_zp_max": dict(x_zp=127, pads=(1, 1, 1, 1), w_zp=-3),
    "u8u8_zps": dict(x_type="uint8", w_type="uint8", x_zp=255, w_zp=0, pads=(2, 2, 2, 2)),
    "u8u8_zp0": dict(x_type="uint8", w_type="uint8", x_zp=0, w_zp=255, y_zp=255),
    "per_channel": dict(per_channel=True, w_zp=5, kernel=(5, 5), pads=(2, 2, 2, 2)),
    "conv1d": dict(spatial=(9,), kernel=(3,), strides=(2,), pads=(1, 2)),
    # a vision transformer's patch embedding: kernel = stride, each input read once
    "patch8": dict(spatial=(16, 16), kernel=(8, 8), strides=(8, 8), per_channel=True, bias=True),
    # requantization scale 1/32 exactly: every accumulator = 16 (mod 32) is a rounding half-step
    "half_steps": dict(x_scale=0.25, w_scale=0.125, y_scale=1.0, w_range=(-3, 3), bias=True),
}


def _check_equal(m, target=FLOAT, reference=None, ir=True):
    """Compile; the program (and, with `ir`, the IR's meaning) equals ORT on 3 inputs."""
    r = compile_model(m, "bitwise", target, reference=reference)
    prog = codegen.generate(r.lowered, target)
    for seed in range(3):
        inp = conv_inputs(m, seed, extremes=seed == 2)
        ref = session(m, level="default").run(None, inp)[0]
        np.testing.assert_array_equal(ref, session(m).run(None, inp)[0])
        if ir:
            got = run_graph(r.original, inp, reference=reference)["y"]
            np.testing.assert_array_equal(ref, got)
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])
    return r


def _window_steps(r) -> list[NpuMatMul]:
    return [s for s in r.lowered.steps if isinstance(s, NpuMatMul) and s.window is not None]


@pytest.mark.parametrize("name", list(CASES))
def test_window_conv_on_the_npu_equals_onnxruntime(name):
    r = _check_equal(qconv(**CASES[name]))
    (step,) = _window_steps(r)
    assert step.compute == "Conv"
    assert not [d for d in r.diagnostics if "conv" in d.nodes]


@pytest.mark.parametrize("act,kw", [("Sigmoid", {}), ("Tanh", CASES["depthwise"])])
def test_window_conv_activation_fuses_proven(act, kw):
    r = _check_equal(qconv(activation=act, **kw))
    (site,) = r.sites
    assert site.pattern == f"conv+{act.lower()}" and site.verdict == "proven"
    (step,) = _window_steps(r)
    assert step.fused


def test_window_conv_refutation_replays_on_the_whole_model():
    r = compile_model(qconv(activation="Sigmoid", per_channel=True, bias=True), "bitwise", FIXED)
    (site,) = r.sites
    assert site.verdict == "refuted"
    cx = site.counterexample
    assert not cx.note  # placed at an output element whose patch reads no padding
    m = qconv(activation="Sigmoid", per_channel=True, bias=True)
    idx = tuple(cx.element["index"])
    ref = session(m).run(None, cx.inputs)[0]
    assert int(ref[idx]) == cx.before and int(cx.actual["y"][idx]) == cx.after != cx.before


@pytest.mark.parametrize(
    "kw,what",
    [
        (dict(C_in=4, C_out=6, group=2), "groups 'grouped'"),
        (dict(kernel=(7, 7), pads=(3, 3, 3, 3)), "kernel [7, 7]"),
        (dict(dilations=(2, 2), pads=(2, 2, 2, 2)), "dilations [2, 2]"),
        (dict(strides=(3, 3)), "strides [3, 3]"),
    ],
)
def test_window_the_target_lacks_stays_on_the_host_named(kw, what):
    # npu_fixed's Conv unit: kernels 1/3/5, strides 1/2, dilation 1, groups one/depthwise
    m = qconv(**kw)
    r = compile_model(m, "bitwise", FIXED)
    assert not _window_steps(r)
    (d,) = [d for d in r.diagnostics if "conv" in d.nodes]
    assert d.code == "unsupported_conv_window" and what in d.message
    inp = conv_inputs(m, 0)
    prog = codegen.generate(r.lowered, FIXED)
    np.testing.assert_array_equal(session(m).run(None, inp)[0], simulator.run(prog, inp)[0]["y"])


def test_corrupted_window_is_caught():
    # negative control: the same weights over a shifted window (pads moved, same output
    # shape), or padding read as 0 rather than the zero point, differ from ONNX Runtime
    m = qconv(pads=(1, 1, 1, 1), x_zp=-128)
    r = compile_model(m, "bitwise", FLOAT)
    inp = conv_inputs(m, 0)
    ref = session(m, level="default").run(None, inp)[0]
    g = r.original.clone()
    (conv,) = [n for n in g.nodes if n.op == "matmul"]
    conv.attrs["window"] = dataclasses.replace(conv.attrs["window"], pads=(0, 0, 2, 2))
    assert not np.array_equal(ref, run_graph(g, inp)["y"])
    conv.attrs["window"] = dataclasses.replace(conv.attrs["window"], pads=(1, 1, 1, 1))
    conv.attrs["a_zp"] = 0  # padding reads 0: the input zero point is no longer subtracted
    assert not np.array_equal(ref, run_graph(g, inp)["y"])
    prog = codegen.generate(r.lowered, FLOAT)
    step = next(i for i in prog.instructions if getattr(i, "window", None) is not None)
    bad = dataclasses.replace(step, window=dataclasses.replace(step.window, strides=(1, 2)))
    with pytest.raises(Exception):  # noqa: B017 - any refusal: the output shape changed
        simulator.run(dataclasses.replace(prog, instructions=[
            bad if i is step else i for i in prog.instructions]), inp)  # fmt: skip


def test_u8s8_window_conv_follows_the_host_profile():
    # full-range int8 weights: two products can saturate int16 where ORT sums pairs
    m = qconv(x_type="uint8", x_zp=128, pads=(1, 1, 1, 1), activation="Sigmoid")
    prof = host_profile()
    saturating = prof.u8s8_accumulation == Accumulation.PAIR_SATURATING_INT16
    # where ORT saturates pairs the conv has no meaning here (pair order not modelled): the
    # program keeps it on the host, so only the program is compared with ORT
    r = _check_equal(m, reference=prof, ir=not saturating)
    assert bool(_window_steps(r)) != saturating
    if saturating:
        with pytest.raises(CompilerError, match="pair order"):
            run_graph(r.original, conv_inputs(m, 0), reference=prof)
        (site,) = r.sites
        assert site.verdict == "unknown" and site.reason.code == "reference_divergence"
        assert "pair order" in site.reason.message


def test_u8s8_window_conv_under_avx2_refused_with_reason():
    avx2 = get_profile("ort-x86-avx2")
    r = compile_model(qconv(x_type="uint8", pads=(1, 1, 1, 1)), "bitwise", FLOAT, reference=avx2)
    assert not _window_steps(r)
    (d,) = [d for d in r.diagnostics if "conv" in d.nodes]
    assert d.code == "reference_divergence" and "pair order" in d.message


def test_u8s8_reduce_range_window_conv_is_on_the_npu_under_any_profile():
    # 7-bit weights: no two products reach int16's bounds, so every pair order is exact
    m = qconv(x_type="uint8", x_zp=3, w_range=(-64, 63), group=2, C_in=4, pads=(1, 1, 1, 1))
    for prof in (host_profile(), get_profile("ort-x86-avx2")):
        assert _window_steps(_check_equal(m, reference=prof))


def test_3d_conv_stays_on_the_host_named():
    m = qconv(spatial=(3, 4, 4), kernel=(1, 1, 1))
    g, _ = to_ir(m)
    (conv,) = [n for n in g.nodes if n.origin == ("conv",)]
    assert conv.op == "host_onnx" and "only 1-D and 2-D convs" in conv.attrs["placement"]


def _small_sram_target(sram: int = 2048):
    """npu_float with a tiny sram (and fused tiled convs), so convs must be tiled."""
    import tomllib

    from npu_backend.target import parse_target

    with open("npu_backend/targets/npu_float.toml", "rb") as f:
        data = tomllib.load(f)
    data["memories"]["sram"]["size"] = sram
    data["compute"]["Conv"]["fused_structures"] = ["plain", "tiled"]
    return parse_target(data)


TILED = {
    "grouped_cols_cross_groups": dict(
        C_in=8, C_out=40, group=2, spatial=(16, 12), pads=(1, 1, 1, 1), bias=True,
        per_channel=True, x_zp=-128,
    ),
    "stride2_same_lower": dict(
        C_in=8, C_out=40, group=4, strides=(2, 2), spatial=(17, 12), auto_pad="SAME_LOWER"
    ),
    "depthwise_dilated_fused": dict(
        C_in=16, C_out=16, group=16, spatial=(15, 9), dilations=(2, 2), pads=(2, 1, 0, 2),
        activation="Sigmoid", x_zp=100,
    ),
    "conv1d": dict(
        C_in=8, C_out=24, spatial=(300,), kernel=(5,), strides=(2,), pads=(2, 1), bias=True
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(TILED))
def test_conv_too_big_for_sram_is_tiled_over_rows_and_channels(name):
    target = _small_sram_target()
    m = qconv(**TILED[name])
    r = _check_equal(m, target)
    (step,) = _window_steps(r)
    prog = codegen.generate(r.lowered, target)
    tiles = [i for i in prog.instructions if getattr(i, "window", None) is not None]
    assert tiles and all(i.tile is not None for i in tiles)
    out_rows = r.graph.values["y"].shape[2]
    assert all(i.tile[0] < out_rows for i in tiles)  # row tiles, each with its halo rows
    if name == "grouped_cols_cross_groups":
        assert len(tiles) > 2  # column tiles of 16 over 2 groups of 20 channels
    if name != "grouped_cols_cross_groups":
        return
    # negative control: tiles reading other halo rows (top/bottom pads 1/1 moved to 0/2: the
    # same output shape) are caught
    moved = {
        id(i): dataclasses.replace(i, window=dataclasses.replace(i.window, pads=(0, 1, 2, 1)))
        for i in tiles
    }
    bad = dataclasses.replace(prog, instructions=[moved.get(id(i), i) for i in prog.instructions])
    inp = conv_inputs(m, 0)
    ref = session(m, level="default").run(None, inp)[0]
    assert not np.array_equal(ref, simulator.run(bad, inp)[0]["y"])


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(x_zp=255, w_zp=255),
        dict(x_type="int8", w_type="int8", x_zp=-128, w_zp=127),
    ],
)
def test_conv_integer_on_the_npu_equals_onnxruntime(kw):
    r = _check_equal(conv_integer(**kw))
    (step,) = _window_steps(r)
    assert step.post is None  # the int32 accumulator is the output


def test_qdq_conv_group_is_the_npu_conv_orts_default_session_runs():
    # DQ -> Conv -> Q with uint8 activations: ORT's default session runs QLinearConv
    prof = host_profile()
    r = _check_equal(qdq_conv(), reference=prof)
    (step,) = _window_steps(r)
    assert step.window.strides == (2, 2) and step.bias is not None


def test_window_conv_program_file_round_trips(tmp_path):
    from npu_backend.program import Program

    target = _small_sram_target()
    m = qconv(**TILED["stride2_same_lower"])
    r = compile_model(m, "bitwise", target)
    prog = codegen.generate(r.lowered, target)
    prog.save(tmp_path / "p.npz")
    back = Program.load(tmp_path / "p.npz")
    wins = [i.window for i in back.instructions if getattr(i, "window", None) is not None]
    assert wins and wins == [i.window for i in prog.instructions if getattr(i, "window", None)]
    inp = conv_inputs(m, 1)
    np.testing.assert_array_equal(
        simulator.run(back, inp)[0]["y"], simulator.run(prog, inp)[0]["y"]
    )


def test_u8s8_window_conv_saturable_pairs_are_a_finding_under_any_reference():
    r = compile_model(qconv(x_type="uint8", pads=(1, 1, 1, 1)), "bitwise", FLOAT)
    (f,) = [f for f in r.context.findings if f["nodes"] == ["conv"]]
    assert f["code"] == "reference_divergence" and "pair order" in f["message"]
    assert f["reference_saturates"] is False and f["columns"]
    reduced = compile_model(qconv(x_type="uint8", w_range=(-64, 63)), "bitwise", FLOAT)
    assert not reduced.context.findings  # 7-bit weights: no two products reach int16's bounds


@pytest.mark.slow  # ~0.6 s idle (a compile and an ORT shape run): kept out of the default run
def test_zoo_mac_count_includes_tiled_window_convs():
    """examples/zoo/macs.py counts a tiled window conv's products (every row tile of its
    columns): the program's NPU MACs equal the model's (they were listed as not understood,
    and resnet18's share was a lower bound)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "zoo"))
    from macs import model_macs, program_macs

    target = _small_sram_target()
    m = qconv(**TILED["stride2_same_lower"])
    r = compile_model(m, "bitwise", target)
    prog = codegen.generate(r.lowered, target)
    assert any(getattr(i, "tile", None) is not None for i in prog.instructions)
    npu, host, unknown = program_macs(prog)
    assert (npu, host, unknown) == (model_macs(m)[0], 0, [])
