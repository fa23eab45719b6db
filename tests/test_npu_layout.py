"""One layout on the NPU: consecutive NPU convs (and pools) read each other's channels-last
results directly; a layout transpose is kept only where a host op (or a graph output) reads
the NCHW tensor, and each elided pair is an index-map obligation proven the identity."""

from __future__ import annotations

import numpy as np
import pytest
from pool_models import conv_chain, pool_inputs

from compiler.api import compile_model
from compiler.ir.layout import transpose_chain_terms
from compiler.ort.tables import session
from npu_backend import codegen, simulator
from npu_backend.lowered import HostOnnx, NpuMatMul
from npu_backend.target import load_target
from prover.api import check
from prover.obligation import Obligation
from prover.policy import Policy
from prover.verdict import Status

FLOAT = load_target("npu_backend/targets/npu_float.toml")


def _transposes(r) -> list[HostOnnx]:
    return [s for s in r.lowered.steps if isinstance(s, HostOnnx) and s.name.endswith(".transpose")]


def _equal(m, r, target=FLOAT) -> None:
    prog = codegen.generate(r.lowered, target)
    for seed in range(3):
        inp = pool_inputs(m, seed)
        ref = session(m, level="default").run(None, inp)
        got = simulator.run(prog, inp)[0]
        for o, v in zip(m.graph.output, ref, strict=True):
            np.testing.assert_array_equal(v, got[o.name])


@pytest.mark.parametrize(
    "convs, pool",
    [(("3x3", "1x1", "dw"), False), (("1x1", "3x3"), True), (("dw",), True)],
)
def test_consecutive_npu_ops_keep_one_layout(convs, pool):
    m = conv_chain(convs, pool=pool)
    r = compile_model(m, "bitwise", FLOAT)
    mms = [s for s in r.lowered.steps if isinstance(s, NpuMatMul)]
    assert len(mms) == len(convs) + pool, r.diagnostics
    # only where data crosses: the graph input in, the result out
    assert len(_transposes(r)) == 2, [s.name for s in r.lowered.steps]
    for prev, nxt in zip(mms, mms[1:], strict=False):
        assert nxt.a == prev.out  # channels-last, straight from the NPU op before
    _equal(m, r)


def test_a_host_reader_keeps_its_transpose_and_the_npu_reads_its_own_layout():
    m = conv_chain(("3x3", "3x3"), expose=0)
    r = compile_model(m, "bitwise", FLOAT)
    mms = [s for s in r.lowered.steps if isinstance(s, NpuMatMul)]
    assert mms[1].a == mms[0].out
    assert len(_transposes(r)) == 3  # in, the exposed NCHW c0_out, out
    _equal(m, r)


def test_layout_index_maps_are_proven_and_a_wrong_one_refuted():
    shape = (1, 4, 4, 4)  # NHWC with C = H = W: a wrong permutation keeps the shape
    to_first, to_last = (0, 3, 1, 2), (0, 2, 3, 1)

    def verdict(perms):
        before, after, size = transpose_chain_terms(shape, perms)
        ob = Obligation("index_map", before, after, {"f": (0, size - 1)}, Policy(0))
        return check(ob).status

    assert verdict([to_first, to_last]) == Status.PROVEN
    assert verdict([to_first, to_first]) == Status.REFUTED
    assert verdict([to_last, to_last]) == Status.REFUTED
