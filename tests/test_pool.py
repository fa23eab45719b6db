"""Pools on the NPU's Pool unit, equal to ORT bit for bit. QLinearGlobalAveragePool: ORT's
MLAS kernel (exact int32 image sum minus zero point times size, one float32 requantization
by x_scale / (y_scale * size)) is a depthwise all-ones conv over the whole image. MaxPool of
int8/uint8: each window's largest element, padding never the maximum."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pool_models import gap, maxpool, pool_inputs
from sim_helpers import corrupt_npu_results

from compiler.api import compile_model
from compiler.errors import FrontendError
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import NpuMatMul, NpuMaxPool
from npu_backend.target import load_target

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")

CASES = {
    "u8_7x7": dict(),
    "s8_zp_extremes": dict(dtype="int8", x_zp=-128, y_zp=127),
    "u8_zp_extremes": dict(x_zp=255, y_zp=0, x_scale=0.5, y_scale=0.003),
    "u8_zp_extremes_2": dict(x_zp=0, y_zp=255),
    # x_scale / (y_scale * 4) = 1/8: sums = 4 (mod 8) are rounding half-steps
    "half_steps": dict(shape=(1, 6, 2, 2), x_scale=0.5, y_scale=1.0, x_zp=0, y_zp=0),
    "s8_56x56": dict(shape=(1, 3, 56, 56), dtype="int8", x_zp=-7, y_zp=3),
    "batch2_rect": dict(shape=(2, 5, 3, 5)),
    "image_1x1": dict(shape=(1, 16, 1, 1)),
    "pool1d": dict(shape=(1, 4, 9)),
    "channels_last": dict(shape=(2, 7, 7, 8), channels_last=1),
}


def _pool_steps(r) -> list[NpuMatMul]:
    return [s for s in r.lowered.steps if isinstance(s, NpuMatMul) and s.compute == "Pool"]


def _check_equal(m, target=FLOAT):
    r = compile_model(m, "bitwise", target)
    prog = codegen.generate(r.lowered, target)
    for seed in range(3):
        inp = pool_inputs(m, seed)
        ref = session(m, level="default").run(None, inp)[0]
        np.testing.assert_array_equal(ref, run_graph(r.original, inp)["y"])
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])
    return r


def _sample(names, default):
    """Every case, those not in `default` under -m slow (the default run keeps a sample)."""
    return [n if n in default else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", _sample(CASES, ("s8_zp_extremes", "half_steps", "channels_last")))
def test_global_average_pool_on_the_npu_equals_onnxruntime(name):
    r = _check_equal(gap(**CASES[name]))
    assert len(_pool_steps(r)) == 1, r.diagnostics
    assert not [d for d in r.diagnostics if "gap" in d.nodes]


def test_pool_the_target_lacks_stays_on_the_host_named():
    # npu_fixed's Pool unit sums images up to 7 per axis: 14 x 14 is refused by its code
    r = _check_equal(gap(shape=(1, 4, 14, 14)), FIXED)
    assert not _pool_steps(r)
    codes = {d.code.value for d in r.diagnostics if "gap" in d.nodes}
    assert codes == {"unsupported_conv_window"}, r.diagnostics
    no_pool = dataclasses.replace(
        FLOAT, computes=tuple(c for c in FLOAT.computes if c.op != "Pool")
    )
    r = _check_equal(gap(), no_pool)
    assert not _pool_steps(r)
    assert any("no Pool unit" in d.message for d in r.diagnostics)


@pytest.mark.slow
def test_fixed_point_pool_requantization_is_an_obligation():
    # npu_fixed requantizes in fixed point: placed only where that is proven equal to ORT's
    # float32 scale; either way the program equals ORT
    r = _check_equal(gap(shape=(1, 4, 4, 4), x_scale=0.25, y_scale=1.0 / 16), FIXED)
    assert _pool_steps(r) or {d.code.value for d in r.diagnostics} & {"refuted", "unknown"}


@pytest.mark.parametrize(
    "kw, what",
    [
        (dict(x_scale=1e-12), "scales"),  # x_scale / (y_scale * 49) under 2^-32
        pytest.param(
            dict(x_scale=300.0, y_scale=0.01, shape=(1, 2, 1, 1)), "scales", marks=pytest.mark.slow
        ),  # >= 256
    ],
)
def test_scales_orts_kernel_refuses_are_bad_input(kw, what):
    with pytest.raises(FrontendError, match=what) as e:
        compile_model(gap(**kw), "bitwise", FLOAT)
    assert e.value.bad_input
    with pytest.raises(Exception, match="out of computation range"):
        m = gap(**kw)
        session(m).run(None, pool_inputs(m, 0))


def test_corrupted_pool_is_caught(monkeypatch):
    m = gap()
    r = compile_model(m, "bitwise", FLOAT)
    prog = codegen.generate(r.lowered, FLOAT)
    inp = pool_inputs(m, 0)
    corrupt_npu_results(monkeypatch)
    ref = session(m).run(None, inp)[0]
    assert not np.array_equal(ref, simulator.run(prog, inp)[0]["y"])


MAXPOOL_CASES = {
    "resnet_3x3_s2_p1": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "s8_asym_pads": dict(dtype="int8", shape=(2, 4, 9, 6), kernel_shape=[2, 3], strides=[2, 1],
                         pads=[0, 1, 1, 0]),
    "ceil_mode": dict(shape=(1, 3, 13, 13), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "ceil_mode_pads": dict(dtype="int8", shape=(1, 2, 6, 6), kernel_shape=[2, 2],
                           strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    "dilations": dict(shape=(1, 2, 10, 10), kernel_shape=[3, 3], strides=[3, 3],
                      pads=[1, 1, 1, 1], dilations=[2, 2]),
    "same_upper": dict(dtype="int8", shape=(1, 3, 8, 7), kernel_shape=[3, 3], strides=[2, 2],
                       auto_pad="SAME_UPPER"),
    "pool1d": dict(shape=(1, 2, 10), kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1),
    "opset12": dict(opset=12, kernel_shape=[2, 2], strides=[2, 2]),
}  # fmt: skip


@pytest.mark.parametrize("name", _sample(MAXPOOL_CASES, ("resnet_3x3_s2_p1", "ceil_mode_pads")))
def test_integer_max_pool_on_the_npu_equals_onnxruntime(name):
    r = _check_equal(maxpool(**MAXPOOL_CASES[name]))
    assert [type(s).__name__ for s in r.lowered.steps] == ["NpuMove", "NpuMaxPool", "NpuMove"]
    assert not r.diagnostics


def test_max_pool_the_target_lacks_stays_on_the_host_named():
    m = maxpool(shape=(1, 2, 9, 9), kernel_shape=[9, 9])  # npu_fixed's windows reach 7
    r = _check_equal(m, FIXED)
    assert not [s for s in r.lowered.steps if isinstance(s, NpuMaxPool)]
    assert {d.code.value for d in r.diagnostics} == {"unsupported_conv_window"}
    no_max = dataclasses.replace(
        FLOAT,
        computes=tuple(
            dataclasses.replace(c, max_pool=False) if c.op == "Pool" else c for c in FLOAT.computes
        ),
    )
    r = _check_equal(maxpool(kernel_shape=[2, 2]), no_max)
    assert {d.code.value for d in r.diagnostics} == {"unsupported_function"}


@pytest.mark.slow
def test_max_pool_with_indices_read_and_float_max_pool_run_on_the_host():
    m = maxpool(kernel_shape=[2, 2], indices=True)
    r = compile_model(m, "bitwise", FLOAT)
    assert [type(s).__name__ for s in r.lowered.steps] == ["HostOnnx"]
    assert any("Indices" in d.message for d in r.diagnostics)
    prog = codegen.generate(r.lowered, FLOAT)
    inp = pool_inputs(m, 0)
    got = simulator.run(prog, inp)[0]
    for o, want in zip(m.graph.output, session(m).run(None, inp), strict=True):
        np.testing.assert_array_equal(want, got[o.name])


@pytest.mark.slow
def test_corrupted_max_pool_is_caught(monkeypatch):
    from npu_backend import isa

    m = maxpool(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    r = compile_model(m, "bitwise", FLOAT)
    prog = codegen.generate(r.lowered, FLOAT)
    inp = pool_inputs(m, 0)
    ref = session(m).run(None, inp)[0]
    real = isa.MaxPool.compute
    # every result replaced by 1: the comparison with ORT must see it
    monkeypatch.setattr(isa.MaxPool, "compute", lambda self, x: real(self, x) * 0 + 1)
    assert not np.array_equal(ref, simulator.run(prog, inp)[0]["y"])


@pytest.mark.slow
def test_pool_program_round_trips_and_its_sums_are_no_model_macs(tmp_path):
    import sys
    from pathlib import Path

    from npu_backend.program import Program

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "zoo"))
    import macs  # noqa: E402

    m = gap()
    r = compile_model(m, "bitwise", FLOAT)
    prog = codegen.generate(r.lowered, FLOAT)
    prog.save(tmp_path / "p.npu")
    back = Program.load(tmp_path / "p.npu")
    assert [i.unit for i in back.ops("MatMul")] == ["Pool"]
    inp = pool_inputs(m, 0)
    np.testing.assert_array_equal(
        simulator.run(prog, inp)[0]["y"], simulator.run(back, inp)[0]["y"]
    )
    assert macs.program_macs(back) == (0, 0, [])


def test_qlinear_average_pool_is_hosted_by_name_and_equals_onnxruntime():
    from onnx import TensorProto as TP
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    node = oh.make_node(
        "QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
        kernel_shape=[2, 2], count_include_pad=1, name="ap",
    )  # fmt: skip
    inits = [
        nh.from_array(np.float32(0.5), "xs"), nh.from_array(np.uint8(197), "xz"),
        nh.from_array(np.float32(1.0), "ys"), nh.from_array(np.uint8(211), "yz"),
    ]  # fmt: skip
    g = oh.make_graph(
        [node], "ap", [oh.make_tensor_value_info("x", TP.UINT8, [1, 2, 5, 5])],
        [oh.make_tensor_value_info("y", TP.UINT8, [1, 2, 4, 4])], inits,
    )  # fmt: skip
    m = oh.make_model(
        g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    )
    m.ir_version = 8
    r = _check_equal(m)
    assert [type(s).__name__ for s in r.lowered.steps] == ["HostOnnx"]
    assert any("float32" in d.message and d.code.value == "unsupported_op" for d in r.diagnostics)
