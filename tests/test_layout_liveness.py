"""Layout transposes the NPU's readers keep alive: an NPU step reading an NCHW tensor whose
producer wrote channels-last (a MaxPool, a conv) keeps the transpose back to NCHW, whatever
operand of the step reads it (resnet18's residual Add read the MaxPool's NCHW result as its
second operand, which the dead-move sweep did not count: codegen failed)."""

from __future__ import annotations

import numpy as np
from onnx import helper as oh
from pool_models import conv_chain, pool_inputs

from compiler.api import compile_model
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import NpuEltwise, NpuMaxPool
from npu_backend.target import load_target

FLOAT = load_target("npu_backend/targets/npu_float.toml")


def _residual_after_pool():
    """x -> conv c0 -> MaxPool c1 -> conv c2 -> QLinearAdd(c2, c1) -> y (a resnet block)."""
    m = conv_chain(("3x3", "mp", "3x3"))
    g = m.graph
    g.node[-1].output[0] = "c2_out"
    add = oh.make_node(
        "QLinearAdd",
        ["c2_out", "s", "z", "c1_out", "s", "z", "s", "z"],
        ["y"],
        domain="com.microsoft",
        name="add",
    )
    g.node.append(add)
    return m


def test_second_operand_of_an_npu_add_keeps_the_pools_transpose():
    m = _residual_after_pool()
    r = compile_model(m, "bitwise", FLOAT)
    kinds = {type(s) for s in r.lowered.steps}
    assert NpuMaxPool in kinds and NpuEltwise in kinds
    prog = codegen.generate(r.lowered, FLOAT)
    for seed in range(3):
        inp = pool_inputs(m, seed)
        ref = session(m, level="default").run(None, inp)[0]
        np.testing.assert_array_equal(ref, simulator.run(prog, inp)[0]["y"])
