"""The simulator applies a MatMul's parameter record with the table read from table memory.
Where that table is the descriptor's own, the descriptor's epilogue is applied as it is
(a per-channel epilogue is not copied column by column); a table memory holding another
table is applied as held."""

from __future__ import annotations

import dataclasses

import numpy as np
from test_backend_support import N, fused_post, matmul_model, x_input

import npu_backend.simulator as sim
from npu_backend.codegen import generate
from npu_backend.isa import MatMul, TableLoad
from npu_backend.postprocess import apply_columns
from npu_backend.target import load_target

FLOAT = load_target()


def _per_channel_program():
    p = fused_post(FLOAT)
    posts = tuple(p.with_requants(p.requant.with_scales([0.002 + 0.0001 * j for j in range(N)])))
    return generate(matmul_model(posts), FLOAT), posts


def _applied(monkeypatch) -> list:
    seen: list = []

    def recording(post, acc):
        seen.append(post)
        return apply_columns(post, acc)

    monkeypatch.setattr(sim, "apply_columns", recording)
    return seen


def test_the_descriptors_own_table_applies_the_descriptors_epilogue(monkeypatch):
    prog, posts = _per_channel_program()
    seen = _applied(monkeypatch)
    out = sim.run(prog, x_input())[0]["y"]
    (mm,) = [i for i in prog.instructions if isinstance(i, MatMul)]
    assert seen and all(s is mm.post for s in seen)  # no copy of its columns
    seen.clear()
    monkeypatch.setattr(sim, "_own_table", lambda post: None)  # the copying path
    assert np.array_equal(sim.run(prog, x_input())[0]["y"], out)
    assert seen and all(s is not mm.post and s == mm.post for s in seen)


def test_another_table_in_table_memory_is_the_one_applied(monkeypatch):
    """Negative: the slot's table overwritten before the MatMul (reversed): the output is
    the epilogue with that table, not with the descriptor's."""
    prog, posts = _per_channel_program()
    own = prog.constants[prog.ops(TableLoad)[0].table]
    consts = dict(prog.constants, **{"table/other": own[::-1]})
    ins = list(prog.instructions)
    k = next(i for i, x in enumerate(ins) if isinstance(x, MatMul))
    ins.insert(k, TableLoad("table/other", 0, 0, 256))
    clobbered = dataclasses.replace(prog, instructions=ins, constants=consts)
    seen = _applied(monkeypatch)
    got = sim.run(clobbered, x_input())[0]["y"]
    (mm,) = [i for i in prog.instructions if isinstance(i, MatMul)]
    assert seen and all(s is not mm.post for s in seen)
    other = tuple(int(v) for v in np.asarray(own[::-1]).reshape(-1))
    assert all(p.lut.table == other for s in seen for p in s)
    assert not np.array_equal(got, sim.run(prog, x_input())[0]["y"])
