"""The simulator applies a MatMul's epilogue with the table read from table memory
(`MatMul.loaded_post`, after checking its parameter record). Where that table is the
descriptor's own, `with_table` gives the descriptor's epilogue as it is (a per-channel
epilogue is not copied column by column); a table memory holding another table is applied
as held."""

from __future__ import annotations

import dataclasses

import numpy as np
from test_backend_support import N, fused_post, matmul_model, x_input

import npu_backend.isa as isa
import npu_backend.simulator as sim
from npu_backend.codegen import generate
from npu_backend.isa import MatMul, TableLoad
from npu_backend.postprocess import PostProcess, apply_columns
from npu_backend.target import load_target
from prover.by_identity import ByIdentity

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

    monkeypatch.setattr(isa, "apply_columns", recording)
    monkeypatch.setattr(sim, "apply_columns", recording)
    return seen


def _copying(post, table):
    """`with_table` as it was: every column copied with `table`, its own table or not."""
    posts = post if isinstance(post, tuple) else (post,)
    out = tuple(
        p if p.lut is None else p.with_lut(dataclasses.replace(p.lut, table=table)) for p in posts
    )
    return out if isinstance(post, tuple) else out[0]


def test_the_descriptors_own_table_applies_the_descriptors_epilogue(monkeypatch):
    prog, posts = _per_channel_program()
    seen = _applied(monkeypatch)
    out = sim.run(prog, x_input())[0]["y"]
    (mm,) = [i for i in prog.instructions if isinstance(i, MatMul)]
    assert seen and all(s is mm.post for s in seen)  # no copy of its columns
    seen.clear()
    monkeypatch.setattr(isa, "with_table", _copying)  # the copying path
    monkeypatch.setattr(isa, "_LOADED", ByIdentity(256))
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


def test_with_table_copies_only_where_a_table_changes():
    """`with_table` returns the epilogue itself where every LUT holds the table already, a
    copy with the table otherwise (a record, its tables stripped, gets them back)."""
    _, posts = _per_channel_program()
    own = posts[0].lut.table
    assert isa.with_table(posts, own) is posts
    record = isa.with_table(posts, None)
    assert record is not posts and all(p.lut.table is None for p in record)
    assert isa.with_table(record, None) is record
    back = isa.with_table(record, own)
    assert back == posts and back is not posts
    single = posts[0]
    assert isinstance(single, PostProcess) and isa.with_table(single, own) is single
