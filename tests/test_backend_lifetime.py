"""Table slots and parameter records shared by many fused ops: loaded once while live,
never overwritten while a later instruction needs them (`npu_backend.lifetime`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_backend_support import lut_params, matmul_chain

from npu_backend.codegen import generate
from npu_backend.isa import MatMul, ParamLoad, TableLoad
from npu_backend.lifetime import LifetimeError, check_lifetimes
from npu_backend.lowered import LoweredModel, unfuse_model
from npu_backend.postprocess import PostProcess
from npu_backend.program import Program
from npu_backend.simulator import run
from npu_backend.target import load_target, requant_from_scale

FLOAT = load_target()
K = N = 8
FUNCS = ("sigmoid", "tanh", "gelu")  # three distinct tables


def per_channel(function: str, seed: int) -> tuple[PostProcess, ...]:
    """N distinct requantizers (a 128-byte record) and the table of `function`."""
    scales = 0.002 * (1 + np.arange(N) / N) * (1 + seed / 10)
    lut = lut_params(FLOAT, function)
    return tuple(
        PostProcess(requant_from_scale(float(s), 0, "int8", "float32"), function=function, lut=lut)
        for s in scales
    )


def chain(order: list[int]) -> LoweredModel:
    """x -> mm0 -> mm1 -> ...: site i uses table FUNCS[order[i]] and record number order[i]."""
    rng = np.random.default_rng(0)
    ws = [rng.integers(-128, 128, (K, N)).astype(np.int8) for _ in order]
    return matmul_chain(ws, [per_channel(FUNCS[kind], kind) for kind in order])


def scarce(slots: int = 2, pmem: int = 256):
    """Fewer table slots and parameter registers than sites: 2 slots, 2 records of 128 B."""
    mems = tuple((m, pmem if m == "pmem" else s) for m, s in FLOAT.memories)
    return dataclasses.replace(
        FLOAT, memories=mems, tables=dataclasses.replace(FLOAT.tables, slots=slots)
    )


ORDER = [0, 0, 1, 2, 1, 0, 2, 2, 0, 1]  # 10 sites, 3 tables and 3 records, 2 slots of each


def x_in():
    return {"x": np.random.default_rng(1).integers(-128, 128, (4, K)).astype(np.int8)}


def test_more_sites_than_slots_and_registers_stay_correct():
    model = chain(ORDER)
    target = scarce()
    prog = generate(model, target)  # generate runs check_lifetimes
    check_lifetimes(prog, target.tables.slots)
    roomy, _ = run(generate(model, FLOAT), x_in())
    got, c = run(prog, x_in())
    split, _ = run(generate(unfuse_model(model), FLOAT), x_in())
    out = model.outputs[0]
    np.testing.assert_array_equal(got[out], roomy[out])
    np.testing.assert_array_equal(got[out], split[out])
    # reuse while live: fewer loads than uses; with room for all, each value loads once
    assert len(FUNCS) < c.table_loads < len(ORDER)
    assert len(FUNCS) < c.param_loads < len(ORDER)
    # furthest next use evicted (Belady): ORDER with 2 registers misses at uses 0, 2, 3, 5, 9
    assert c.table_loads == c.param_loads == 5
    _, rc = run(generate(model, FLOAT), x_in())
    assert rc.table_loads == rc.param_loads == len(FUNCS)
    # Belady: consecutive uses of one value never reload it
    loads = [i for i in prog.instructions if isinstance(i, TableLoad | ParamLoad | MatMul)]
    kinds = [type(i).__name__ for i in loads]
    assert "TableLoad" not in kinds[kinds.index("MatMul") + 1 : kinds.index("MatMul") + 2]
    assert c.peak_bytes["pmem"] <= 256 and c.peak_bytes["tmem"] <= 2 * 256


def _evicting_load(prog: Program, kind: type) -> int:
    """Index of a load that brings back a value evicted earlier (a reload)."""
    seen = set()
    for k, ins in enumerate(prog.instructions):
        if isinstance(ins, kind):
            key = ins.table if isinstance(ins, TableLoad) else repr(ins.post)
            if key in seen:
                return k
            seen.add(key)
    raise AssertionError("no reload in the program")


def test_dropping_a_table_reload_breaks_the_invariant():
    prog = generate(chain(ORDER), scarce())
    k = _evicting_load(prog, TableLoad)
    broken = dataclasses.replace(
        prog, instructions=prog.instructions[:k] + prog.instructions[k + 1 :]
    )
    with pytest.raises(LifetimeError, match="holds another table|holds no table"):
        check_lifetimes(broken, 2)


def test_a_load_into_a_live_slot_breaks_the_invariant():
    """Evict the wrong slot: the reload goes where a table still needed later lives."""
    prog = generate(chain(ORDER), scarce())
    k = _evicting_load(prog, TableLoad)
    load = prog.instructions[k]
    assert isinstance(load, TableLoad)
    other = 1 - load.slot
    wrong = dataclasses.replace(load, slot=other, addr=other * load.nbytes)
    ins = list(prog.instructions)
    ins[k] = wrong
    with pytest.raises(LifetimeError, match="holds another table"):
        check_lifetimes(dataclasses.replace(prog, instructions=ins), 2)


def test_an_overlapping_parameter_load_breaks_the_invariant():
    prog = generate(chain(ORDER), scarce())
    k = _evicting_load(prog, ParamLoad)
    load = prog.instructions[k]
    assert isinstance(load, ParamLoad)
    # place the reload 64 bytes into the other resident record's range
    others = [i.addr for i in prog.instructions[:k] if isinstance(i, ParamLoad)]
    target_addr = next(a for a in others if a != load.addr) + 64
    ins = list(prog.instructions)
    ins[k] = dataclasses.replace(load, addr=target_addr)
    for j in range(k + 1, len(ins)):  # its users follow it to the new address
        if isinstance(ins[j], MatMul) and ins[j].param_addr == load.addr:
            ins[j] = dataclasses.replace(ins[j], param_addr=target_addr)
        elif isinstance(ins[j], ParamLoad):
            break
    with pytest.raises(LifetimeError, match=r"overwritten by the ParamLoad #\d+"):
        check_lifetimes(dataclasses.replace(prog, instructions=ins), 2)


def test_loading_a_resident_value_again_breaks_the_invariant():
    prog = generate(chain([0, 1, 0]), FLOAT)
    first_table = next(i for i in prog.instructions if isinstance(i, TableLoad))
    first_record = next(i for i in prog.instructions if isinstance(i, ParamLoad))
    for dup in (dataclasses.replace(first_table, slot=5, addr=5 * 256), first_record):
        broken = dataclasses.replace(prog, instructions=[*prog.instructions, dup])
        with pytest.raises(LifetimeError, match="loaded again while resident"):
            check_lifetimes(broken, FLOAT.tables.slots)
