"""Broken descriptor/parameter invariants fail with a specific error, never a wrong result."""

import dataclasses

import numpy as np
import pytest
from test_backend_support import fused_post, matmul_model, x_input

from npu_backend.codegen import generate
from npu_backend.isa import MatMul
from npu_backend.postprocess import RequantParams
from npu_backend.simulator import run
from npu_backend.target import load_target
from prover.domain import KernelError
from prover.terms import Var

FLOAT = load_target()


def test_post_enabled_matmul_without_epilogue_is_rejected():
    prog = generate(matmul_model(fused_post(FLOAT)), FLOAT)
    (mm,) = prog.ops(MatMul)
    assert mm.enabled_post() == mm.post  # the generated descriptor is consistent
    broken = dataclasses.replace(mm, post=None)
    with pytest.raises(ValueError, match="post_enable is set but the descriptor has no epilogue"):
        broken.epilogue(np.zeros((1, 1), dtype=np.int64), None)
    bad_prog = dataclasses.replace(
        prog, instructions=[broken if i is mm else i for i in prog.instructions]
    )
    with pytest.raises(ValueError, match="no epilogue"):
        run(bad_prog, x_input())


@pytest.mark.parametrize("scheme", ["fixed_double", "fixed_single"])
def test_fixed_point_requant_without_multiplier_is_rejected(scheme):
    rq = RequantParams(scheme=scheme, zp=0, out_type="int8", multiplier=1 << 30)
    with pytest.raises(KernelError, match="needs multiplier and shift"):
        rq.check()
    with pytest.raises(KernelError, match="needs multiplier and shift"):
        rq.term(Var("acc"))
    RequantParams(scheme=scheme, zp=0, out_type="int8", multiplier=1 << 30, shift=3).check()


def test_float_requant_without_scale_has_no_term():
    rq = RequantParams(scheme="float32", zp=0, out_type="int8")
    with pytest.raises(KernelError, match="needs a scale"):
        rq.term(Var("acc"))
