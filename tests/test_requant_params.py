"""`compiler.ir.epilogue.requant_params`: the NPU requantizer of a `requantize` node, used by
a fused epilogue stage and by the standalone lowering (two copies before). Its term must be
the node's own meaning on every accumulator; a changed parameter must not be."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.ir.epilogue import requant_params
from compiler.ir.graph import Node
from compiler.ir.semantics import node_term
from prover.domain import NUMPY
from prover.terms import Var, evaluate

NODES = {
    "double": {"multiplier": 1_518_500_250, "shift": -7},
    "single": {"multiplier": 1_102_438_530, "shift": -3},
    "float": {"scale": float(np.float32(0.0123))},
}


def _eval(term, xs):
    return np.asarray(evaluate(term, NUMPY, {"x": xs}))


@pytest.mark.parametrize("scheme", NODES)
def test_npu_requantizer_is_the_node(scheme, rng):
    attrs = {"scheme": scheme, **NODES[scheme], "zp": -5, "out": "int8"}
    n = Node("rq", "requantize", ["a"], ["b"], attrs)
    xs = np.concatenate([rng.integers(-(2**20), 2**20, 20_000), np.arange(-3000, 3000)])
    rq = requant_params(n)
    want = _eval(node_term(n, Var("x")), xs)
    assert np.array_equal(_eval(rq.term(Var("x")), xs), want)
    off = dataclasses.replace(rq, zp=rq.zp + 1)
    assert not np.array_equal(_eval(off.term(Var("x")), xs), want)
