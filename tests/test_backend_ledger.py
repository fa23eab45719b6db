"""Ledger: fusion savings measured by simulating the fused and the unfused program."""

import dataclasses

import numpy as np
import pytest
from test_backend_support import fused_post, matmul_model, requant_post, x_input

from npu_backend.codegen import generate
from npu_backend.ledger import (
    LedgerError,
    flat,
    ledger,
    model_ledger,
    owners,
    profile,
    random_inputs,
)
from npu_backend.lowered import LoweredModel, TensorSpec
from npu_backend.simulator import run
from npu_backend.target import load_target

FLOAT = load_target()
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


@pytest.mark.parametrize("target", [FLOAT, FIXED], ids=["float", "fixed"])
@pytest.mark.parametrize("m", [4, 9])
def test_fused_saves_the_intermediate_tensor(target, m):
    model = matmul_model(fused_post(target, clip=(-100, 100)), m=m)
    (e,) = ledger(model, target, x_input(m=m))
    assert e.site == "mm" and e.onnx_nodes == ("MatMul_0", "Sigmoid_0")
    assert (e.elements, e.element_bytes) == (m * 8, 1)
    assert e.bytes_not_written == e.expected_bytes == m * 8
    assert e.bytes_not_read == m * 8
    assert e.instructions_before == e.instructions_after + 1  # the standalone activation
    assert e.table_loads_added == 0  # the activation needed the same table
    assert e.param_loads_added == 0
    assert e.to_json()["expected_bytes"] == m * 8


def test_only_fused_sites_get_entries():
    assert ledger(matmul_model(requant_post(FLOAT)), FLOAT) == []


def test_two_sites_measured_separately():
    model = matmul_model(fused_post(FLOAT))
    st = model.steps[0]
    second = dataclasses.replace(
        st, name="mm2", out="y2", a_zp=0, bias=None, post=fused_post(FLOAT, "tanh")
    )
    model = LoweredModel(model.inputs, ["y", "y2"], model.constants, [st, second])
    entries = ledger(model, FLOAT)
    assert [e.site for e in entries] == ["mm", "mm2"]
    assert all(e.bytes_not_written == 32 for e in entries)


def test_disagreeing_forms_are_a_bug(monkeypatch):
    model = matmul_model(fused_post(FLOAT))
    import npu_backend.ledger as L

    real = L.unfuse

    def broken(step):
        mm, act = real(step)
        return [mm, dataclasses.replace(act, table=tuple(reversed(act.table)))]

    monkeypatch.setattr(L, "unfuse", broken)
    with pytest.raises(LedgerError, match="differ"):
        ledger(model, FLOAT)


def _chain(sites: int, m: int = 1) -> LoweredModel:
    """`sites` fused MatMuls in a chain: each site's output is the next one's input."""
    base = matmul_model(fused_post(FLOAT), m=m).steps[0]
    w = np.random.default_rng(3).integers(-128, 128, (8, 8)).astype(np.int8)
    steps = [base] + [
        dataclasses.replace(base, name=f"mm{i}", a=prev, w="w8", out=f"y{i}", bias=None)
        for i, prev in enumerate(["y"] + [f"y{i}" for i in range(1, sites - 1)], start=1)
    ]
    model = matmul_model(fused_post(FLOAT), m=m)
    return LoweredModel(model.inputs, [steps[-1].out], {**model.constants, "w8": w}, steps)


def test_every_instruction_is_attributed_and_counters_add_up():
    """Per-step counters of the one profiled run sum to the whole program's counters."""
    model = _chain(5)
    prog = generate(model, FLOAT)
    own = owners(prog, [s.name for s in model.steps])
    assert None not in own and set(own) == {s.name for s in model.steps}
    assert own[-1] == "mm4"  # the graph output's write-back belongs to the last site
    p = profile(prog, random_inputs(model.inputs), [s.name for s in model.steps])
    summed = {k: sum(c.get(k, 0) for c in p.by_step.values()) for k in p.total}
    peaks = {k for k in p.total if "peak" in k}  # high-water marks: the largest step's, not a sum
    assert {k: v for k, v in summed.items() if k not in peaks} == {
        k: v for k, v in p.total.items() if k not in peaks
    }
    assert all(p.total[k] == max(c.get(k, 0) for c in p.by_step.values()) for k in peaks)
    _, counters = run(prog, random_inputs(model.inputs))  # the plain simulator agrees
    assert flat(counters) == p.total


@pytest.mark.parametrize("m", [1, 3])
def test_chain_entries_match_one_site_at_a_time(m):
    """Two runs for all sites give each site what splitting it alone gives (no shared cost)."""
    model = _chain(4, m=m)
    entries = ledger(model, FLOAT)
    assert [e.site for e in entries] == ["mm", "mm1", "mm2", "mm3"]
    for st, e in zip(model.steps, entries, strict=True):
        k_in = model.constants[st.w].shape[0]
        spec = TensorSpec(st.a, "int8", (m, k_in))
        (one,) = ledger(LoweredModel([spec], [st.out], model.constants, [st]), FLOAT)
        assert e.bytes_not_written == e.bytes_not_read == e.expected_bytes == m * 8
        for f in ("bytes_not_written", "bytes_not_read", "table_loads_added", "param_loads_added"):
            assert getattr(e, f) == getattr(one, f), f
        # alone, the site's output is a graph output: one more DmaOut in both forms
        assert e.instructions_before - e.instructions_after == 1
        assert one.instructions_before - one.instructions_after == 1


def test_model_total_is_the_difference_of_the_two_programs():
    model = _chain(3)
    ml = model_ledger(model, FLOAT)
    _, fused = run(generate(model, FLOAT), random_inputs(model.inputs))
    assert ml.fused == flat(fused)
    total = ml.total_json()
    assert total["fusions"] == 3
    assert total["counters_before"]["instructions"] == total["counters_after"]["instructions"] + 3
    assert total["bytes_moved_before"] - total["bytes_moved_after"] == sum(
        e.bytes_moved_before - e.bytes_moved_after for e in ml.fusions
    )


def test_a_model_without_fusions_has_an_empty_ledger_and_equal_totals(monkeypatch):
    model = matmul_model(requant_post(FLOAT))
    ml = model_ledger(model, FLOAT)
    assert ml.fusions == [] and ml.fused == ml.unfused and ml.saved == 0
    # given its program, nothing is generated again (nor an unfused baseline: none exists)
    import npu_backend.ledger as lg

    prog = generate(model, FLOAT)

    def no_generate(*a, **k):
        raise AssertionError("generated again")

    monkeypatch.setattr(lg, "generate", no_generate)
    again = model_ledger(model, FLOAT, program=prog)
    assert again.fused == ml.fused and again.fusions == []


def test_a_given_program_is_measured_as_the_generated_one():
    model = _chain(3)
    a, b = model_ledger(model, FLOAT), model_ledger(model, FLOAT, program=generate(model, FLOAT))
    assert a.fused == b.fused and a.unfused == b.unfused
    assert [e.to_json() for e in a.fusions] == [e.to_json() for e in b.fusions]


def _siblings(target, second: str, m: int = 1) -> LoweredModel:
    """Two fused sites on one input with the same requantizer, activations sigmoid, `second`."""
    model = matmul_model(fused_post(target), m=m)
    st = model.steps[0]
    other = dataclasses.replace(st, name="mm2", out="y2", post=fused_post(target, second))
    return LoweredModel(model.inputs, ["y", "y2"], model.constants, [st, other])


def _with_param_latency(cycles: int):
    return dataclasses.replace(
        FLOAT, schedule=dataclasses.replace(FLOAT.schedule, param_load_cycles=cycles)
    )


@pytest.mark.parametrize("latency", [16, 100_000])
def test_a_fusion_that_needs_its_own_parameter_record_is_flagged(latency):
    """Unfused, both MatMuls requantize alike and share one parameter record; fused, the
    records differ by their activation, so the second fusion adds a parameter load that
    costs more than the standalone activation it removes."""
    target = _with_param_latency(latency)
    ml = model_ledger(_siblings(target, "tanh"), target)
    first, second = ml.fusions
    assert not first.costs_more and first.saved > 0
    assert second.param_loads_added == 1 and second.cost_basis == "cycles"
    assert second.costs_more and second.saved <= -latency
    assert ml.total_json()["costing_more"] == ["mm2"]
    assert second.to_json()["costs_more"] is True


def test_no_flag_when_the_record_is_shared_in_both_forms():
    """The same pair with one activation: nothing extra to load, even at a huge latency."""
    target = _with_param_latency(100_000)
    ml = model_ledger(_siblings(target, "sigmoid"), target)
    assert [e.costs_more for e in ml.fusions] == [False, False]
    assert all(e.param_loads_added == 0 and e.saved > 0 for e in ml.fusions)
    # the input stays live for mm2: unfused, mm's intermediate is live beside it and y
    assert ml.fusions[0].peak_sram_before - ml.fusions[0].peak_sram_after == 8
    assert ml.total_json()["costing_more"] == [] and ml.saved > 0


@pytest.mark.parametrize("m", [1, 4])
def test_cycles_peaks_and_loads_are_the_simulators(m):
    (e,) = ledger(matmul_model(fused_post(FLOAT), m=m), FLOAT, x_input(m=m))
    launch = FLOAT.schedule.launch_cycles
    assert e.cycles_before - e.cycles_after >= launch  # at least the activation's launch
    assert e.counters_before["cycles_by_opcode.Activation"] >= launch
    assert "cycles_by_opcode.Activation" not in e.counters_after
    # alone, the input is dead once the MatMul ran: the intermediate replaces it
    assert e.peak_sram_before == e.peak_sram_after == m * (16 + 8)
    assert (e.table_loads_before, e.table_loads_after) == (1, 1)
    assert (e.param_loads_before, e.param_loads_after) == (1, 1)


def test_same_schedule_in_both_forms_leaves_rereads_unchanged():
    """An explicit tile over N re-reads the input per column tile, fused and unfused alike."""
    caps = [
        dataclasses.replace(c, fused_structures=c.fused_structures | {"tiled"})
        for c in FLOAT.computes
    ]
    target = dataclasses.replace(FLOAT, computes=tuple(caps))
    model = matmul_model(fused_post(target), m=8)
    model.steps[0] = dataclasses.replace(model.steps[0], tile=(2, 4, 16))
    (e,) = ledger(model, target, x_input(m=8))
    assert e.counters_after["matmul_tiles"] == e.counters_before["matmul_tiles"] == 8
    assert e.counters_after["input_reread_bytes"] == 8 * 16  # x read twice
    assert e.weight_rereads_removed == e.input_rereads_removed == 0


def test_without_cycles_the_flag_falls_back_to_bytes():
    e = ledger(matmul_model(fused_post(FLOAT)), FLOAT)[0]
    costly = dataclasses.replace(e, cycles_before=None, cycles_after=None, bytes_moved_after=10**9)
    assert costly.cost_basis == "bytes" and costly.costs_more
    assert dataclasses.replace(costly, bytes_moved_after=0).costs_more is False


def test_a_site_whose_unfused_form_does_not_fit_stays_fused_in_the_baseline():
    """A fused MatMul tiled through a small sram has no unfused form there (a standalone
    activation is not tiled): it is reported as not measured, the other site is measured."""
    caps = [
        dataclasses.replace(c, fused_structures=c.fused_structures | {"tiled"})
        for c in FLOAT.computes
    ]
    mems = tuple((m, 4096 if m == "sram" else n) for m, n in FLOAT.memories)
    target = dataclasses.replace(FLOAT, computes=tuple(caps), memories=mems)
    small = matmul_model(fused_post(target), m=64)
    wide = np.random.default_rng(5).integers(-128, 128, (16, 64)).astype(np.int8)
    big = dataclasses.replace(small.steps[0], name="big", w="w64", out="z", bias=None)
    model = LoweredModel(
        small.inputs, ["y", "z"], {**small.constants, "w64": wide}, [small.steps[0], big]
    )
    ml = model_ledger(model, target)
    assert [e.site for e in ml.fusions] == ["mm"]
    (nodes, why) = ml.not_measured["big"]
    assert nodes == ("MatMul_0", "Sigmoid_0") and "cannot be generated" in why
    assert ml.total_json()["not_measured"][0]["site"] == "big"
    assert ml.fused["matmul_tiles"] > 1  # the big site really is tiled


def test_a_tiled_sites_output_is_among_the_compared_tensors():
    """A tiled MatMul writes its output to dram, not sram: the site-output comparison
    must still see it (it was skipped when only sram was looked at)."""
    caps = [
        dataclasses.replace(c, fused_structures=c.fused_structures | {"tiled"})
        for c in FLOAT.computes
    ]
    target = dataclasses.replace(FLOAT, computes=tuple(caps))
    model = matmul_model(fused_post(target), m=8)
    model.steps[0] = dataclasses.replace(model.steps[0], tile=(2, 4, 16))
    program = generate(model, target)
    p = profile(program, x_input(m=8), [s.name for s in model.steps], target)
    out = model.steps[0].out
    assert p.by_step[model.steps[0].name]["matmul_tiles"] == 8
    outs, _ = run(program, x_input(m=8), target=target)
    assert np.array_equal(p.tensors[out], outs[out])


def test_the_fused_run_keeps_only_the_tensors_it_is_compared_on(monkeypatch):
    """The fused run's tensors (every activation) are dropped but the fused sites' outputs
    before the unfused run: what the two forms are compared on, and no more."""
    import npu_backend.ledger as L

    runs: list = []
    real = L.profile
    monkeypatch.setattr(L, "profile", lambda *a, **kw: runs.append(real(*a, **kw)) or runs[-1])
    model = _chain(2)
    ml = model_ledger(model, FLOAT)
    fused, unfused = runs
    assert len(ml.fusions) == 2
    outs = {st.out for st in model.steps}  # each step is a fused site
    assert set(fused.tensors) == outs and outs < set(unfused.tensors)
