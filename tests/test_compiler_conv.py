"""Pointwise QLinearConv: a matmul over channels on the target's Conv path."""

from __future__ import annotations

import numpy as np
import pytest
from models import conv_activation, matmul_activation, random_inputs

from compiler.api import compile_model, recompile
from compiler.frontend.reader import to_ir
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.target import load_target

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")
CONVS = [
    dict(),
    dict(per_channel=True, bias=True),
    dict(activation="tanh", act_form="qdq", C_in=16, C_out=6),
]


@pytest.mark.parametrize("kw", CONVS)
def test_conv_ir_and_program_equal_onnxruntime(kw):
    m = conv_activation(**kw)
    r = compile_model(m, "bitwise", FLOAT)
    assert r.sites[0].verdict == "proven" and r.sites[0].pattern.startswith("conv+")
    prog = codegen.generate(r.lowered, FLOAT)
    assert any(getattr(s, "compute", None) == "Conv" and s.fused for s in r.lowered.steps)
    for seed in range(3):
        inp = random_inputs(m, seed)
        ref = session(m).run(None, inp)[0]
        np.testing.assert_array_equal(ref, run_graph(r.original, inp)["y"])
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])
    assert recompile(r).graph.fingerprint() == r.graph.fingerprint()


def test_function_kind_is_per_compute_path():
    # npu_fixed: tanh is supported on Conv postprocessing but not on MatMul
    conv = compile_model(
        conv_activation(activation="tanh", act_form="qdq"), "bitwise", FIXED
    ).sites[0]
    mm = compile_model(
        matmul_activation(activation="tanh", act_form="qdq"), "bitwise", FIXED
    ).sites[0]
    assert conv.reason is None or conv.reason.code != "unsupported_function"
    assert conv.verdict in ("proven", "refuted") and conv.obligations
    assert mm.verdict == "rejected" and mm.reason.code == "unsupported_function"


def test_conv_refutation_replays_with_nchw_inputs():
    m = conv_activation(per_channel=True, bias=True, C_out=6)
    r = compile_model(m, "bitwise", FIXED)
    s = r.sites[0]
    assert s.verdict == "refuted"
    cx = s.counterexample
    idx = tuple(cx.element["index"])
    assert idx[1] == cx.element["column"]  # the channel axis holds the refuted column
    ref = session(m).run(None, cx.inputs)[0]
    assert int(ref[idx]) == cx.before and int(cx.actual["y"][idx]) == cx.after != cx.before


def test_kxk_conv_reads_as_a_matmul_over_its_window():
    g, _ = to_ir(conv_activation(kernel=3))
    (conv,) = [n for n in g.nodes if n.origin == ("conv",)]
    assert conv.op == "matmul" and conv.attrs["kind"] == "Conv"
    win = conv.attrs["window"]
    assert win.kernel == (3, 3) and win.pads == (1, 1, 1, 1) and win.group == 1
    assert conv.attrs["w"].shape == (8 * 9, 4)  # [C_in * kh * kw, C_out]
