"""Fusion that knows the schedule: the three strategies on models where they differ.

The pass-ordering artifact: one model with a MatMul+Sigmoid larger than sram, a small one
the user groups and a plain one, on a target whose fused postprocessing exists only in the
"plain" structure. Each strategy keeps different fusions at a different measured cost
(simulator cycles and bytes, `npu_backend.ledger`), and every program equals ONNX Runtime
bitwise (reference "ort-host": the host's own accumulation is probed, not assumed).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from models import make, requantize_node, sigmoid_site
from onnx import helper as oh

from compiler.api import compile_model
from compiler.ir.context import CompileConfig
from compiler.ir.reasons import ACTIONS
from compiler.ir.semantics import run_graph
from compiler.ir.strategy import DEFAULT_STRATEGY, ScheduleStrategy, parse_strategy
from compiler.ir.structure import UNSUPPORTED
from compiler.ort.tables import ort_outputs
from npu_backend.codegen import generate
from npu_backend.isa import MatMul
from npu_backend.ledger import bytes_moved, model_ledger
from npu_backend.lowered import HostOnnx, NpuMatMul
from npu_backend.simulator import run
from npu_backend.target import load_target
from prover.requant import onnx_requant_scale, quantize_multiplier
from prover.verdict import ReasonCode, Status

FLOAT = load_target()
GCU = ReasonCode.GROUPED_CODEGEN_UNSUPPORTED
BIG, GROUPED, PLAIN = (64, 256, 128), (2, 16, 8), (2, 16, 8)  # (M, K, N) of mm0, mm1, mm2


def plain_only_target(sram: int = 16384, wmem: int = 16384):
    """npu_float with small memories and fused postprocessing only in "plain" (unfused
    MatMuls still tile)."""
    caps = tuple(
        dataclasses.replace(c, fused_structures=frozenset({"plain"})) if c.op == "MatMul" else c
        for c in FLOAT.computes
    )
    mems = tuple((m, {"sram": sram, "wmem": wmem}.get(m, size)) for m, size in FLOAT.memories)
    return dataclasses.replace(FLOAT, computes=caps, memories=mems)


def chains(shapes, integer: tuple[int, ...] = ()) -> onnx.ModelProto:
    """Independent x{i} -> MatMul{i} -> Sigmoid{i} -> y{i} chains (QLinearMatMul, or for the
    indices in `integer` MatMulInteger -> float-scale Requantize) of the (M, K, N) shapes."""
    nodes, inits, inputs, outputs = [], [], [], []
    for i, shape in enumerate(shapes):
        ys = 0.05 * (1 + i)
        matmul = None
        if i in integer:
            scale = float(onnx_requant_scale(0.02, 0.01, ys))
            mult, shift = quantize_multiplier(scale)
            matmul = [
                oh.make_node(
                    "MatMulInteger", [f"x{i}", f"W{i}", f"z{i}", f"z{i}"], [f"a{i}"], name=f"mm{i}"
                ),
                requantize_node(
                    f"a{i}", f"h{i}", multiplier=mult, shift=shift, rounding="float",
                    scale=scale, name=f"rq{i}",
                ),
            ]  # fmt: skip
        site, consts, x, y = sigmoid_site(i, shape, w_seed=i, y_scale=ys, matmul=matmul)
        nodes += site
        inits += consts
        inputs.append(x)
        outputs.append(y)
    return make(nodes, inputs, outputs, inits)


def inputs_of(model: onnx.ModelProto, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        vi.name: rng.integers(
            -128, 128, [d.dim_value for d in vi.type.tensor_type.shape.dim]
        ).astype(np.int8)
        for vi in model.graph.input
    }


@dataclasses.dataclass
class Outcome:
    """What one strategy made of the model, measured."""

    result: object
    fused: set[str]  # compute nodes fused and run on the NPU
    on_host: set[str]  # compute nodes of fused sites placed on the host whole
    rejected: dict[str, int]  # compute node -> obligations kept, for grouped_codegen_unsupported
    cycles: int
    bytes: int
    outputs: dict[str, np.ndarray]


def compile_with(model, target, strategy: str, schedule=None, reference="ort-host") -> Outcome:
    r = compile_model(
        model, "bitwise", target, schedule=schedule or {}, schedule_strategy=strategy,
        reference=reference,
    )  # fmt: skip
    steps = r.lowered.steps
    fused = {s.name for s in steps if isinstance(s, NpuMatMul) and s.fused}
    host = {
        site.compute.name
        for site in r.sites
        if site.applied
        and any(isinstance(s, HostOnnx) and site.compute.name in s.onnx_nodes for s in steps)
    }
    rejected = {
        s.compute.name: len(s.obligations)
        for s in r.sites
        if s.verdict == Status.REJECTED and s.reason.code is GCU
    }
    ledger = model_ledger(r.lowered, target)
    outs, _ = run(generate(r.lowered, target), inputs_of(model), target=target)
    return Outcome(
        r, fused, host, rejected, ledger.fused["cycles"], bytes_moved(ledger.fused), outs
    )


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """The three strategies on the three-site model ({"mm1": "grouped"})."""
    model = chains([BIG, GROUPED, PLAIN])
    path = tmp_path_factory.mktemp("artifact") / "three.onnx"
    onnx.save(model, path)
    target = plain_only_target()
    got = {s: compile_with(model, target, s.value, {"mm1": "grouped"}) for s in ScheduleStrategy}
    return got, ort_outputs(path, inputs_of(model))


def test_pass_ordering_artifact_each_strategy_keeps_different_fusions(artifact):
    got, _ = artifact
    early, alt, late = (got[s] for s in ScheduleStrategy)
    # early: the big site is fused as "plain" (the only structure asked), cannot be tiled
    # fused, and lowering places the whole fused op on the host
    assert early.fused == {"mm2"} and early.on_host == {"mm0"}
    assert early.rejected == {"mm1": 0}
    # alternatives: both sites proven first, then the unfused alternative kept, proof kept
    assert alt.fused == {"mm2"} and not alt.on_host
    assert set(alt.rejected) == {"mm0", "mm1"} and all(alt.rejected.values())
    # late: the schedule is known before proving: nothing proven for either
    assert late.fused == {"mm2"} and not late.on_host
    assert late.rejected == {"mm0": 0, "mm1": 0}
    # the big MatMul runs tiled, unfused, on the NPU under alternatives and late
    for o in (alt, late):
        prog = generate(o.result.lowered, o.result.context.config.target)
        mm0 = [i for i in prog.ops(MatMul) if i.name == "mm0"]
        assert len(mm0) > 1 and all(i.structure == "tiled" and i.function is None for i in mm0)


def test_pass_ordering_artifact_costs_are_measured(artifact):
    got, _ = artifact
    early, alt, late = (got[s] for s in ScheduleStrategy)
    print("\nstrategy      fused  on host  rejected (proofs kept)  NPU cycles  NPU bytes")
    for s, o in got.items():
        print(
            f"{s.value:13} {','.join(sorted(o.fused)):6} {','.join(sorted(o.on_host)) or '-':8} "
            f"{o.rejected!s:23} {o.cycles:10} {o.bytes:10}"
        )
    # early keeps the big MatMul off the NPU: far fewer NPU cycles, the work moved to the host
    assert early.cycles < alt.cycles
    # alternatives and late emit the same program here: the same measured cost
    assert (alt.cycles, alt.bytes) == (late.cycles, late.bytes)


def test_pass_ordering_artifact_programs_equal_onnx_runtime(artifact):
    got, want = artifact
    for s, o in got.items():
        for name, w in want.items():
            np.testing.assert_array_equal(o.outputs[name], w, err_msg=f"{s.value}: {name}")


def test_the_message_and_the_options(artifact):
    got, _ = artifact
    for o in got.values():
        for site in o.result.sites:
            if site.reason is not None and site.reason.code is GCU:
                assert UNSUPPORTED in site.reason.message
    action = ACTIONS[GCU]
    for option in ("disable this fusion", "keep the original graph", "change grouping"):
        assert option in action
    assert "tiled" in got[ScheduleStrategy.LATE].result.site("mm0").reason.message


def test_late_schedules_the_unfused_graph_and_loses_a_fusion_alternatives_keeps():
    """MatMulInteger's int32 result (32x128x4 = 16 KiB) alone exceeds sram: scheduled first,
    the MatMul is tiled and late cannot fuse; the fused form writes int8 (4 KiB), fits
    resident, and alternatives (and early) fuse it. All equal the IR's reference."""
    model = chains([(32, 16, 128)], integer=(0,))
    target = plain_only_target()
    got = {s: compile_with(model, target, s.value, reference=None) for s in ScheduleStrategy}
    assert got[ScheduleStrategy.LATE].fused == set()
    assert got[ScheduleStrategy.LATE].rejected == {"mm0": 0}
    assert got[ScheduleStrategy.ALTERNATIVES].fused == {"mm0"}
    assert got[ScheduleStrategy.EARLY].fused == {"mm0"}
    # the lost fusion is measured: the int32 intermediate moves under late
    assert got[ScheduleStrategy.ALTERNATIVES].bytes < got[ScheduleStrategy.LATE].bytes
    r = got[ScheduleStrategy.LATE].result
    want = run_graph(r.original, inputs_of(model))
    for s, o in got.items():
        for name, w in want.items():
            np.testing.assert_array_equal(o.outputs[name], w, err_msg=f"{s.value}: {name}")


def test_late_fuses_tiled_where_the_target_can():
    """With fused "tiled" on the target, late fuses the big site in the scheduler's
    structure ("tiled"); early fuses it labelled "plain" (codegen tiles it all the same)."""
    mm = FLOAT.compute("MatMul")
    target = dataclasses.replace(
        plain_only_target(),
        computes=tuple(
            dataclasses.replace(mm, fused_structures=frozenset({"plain", "tiled"}))
            if c.op == "MatMul"
            else c
            for c in FLOAT.computes
        ),
    )
    model = chains([BIG])
    late = compile_model(model, "bitwise", target, schedule_strategy="late")
    early = compile_model(model, "bitwise", target, schedule_strategy="early")
    assert late.lowered.steps[0].structure == "tiled" and late.lowered.steps[0].fused
    assert early.lowered.steps[0].structure == "plain" and early.lowered.steps[0].fused


def test_the_default_and_the_config():
    assert DEFAULT_STRATEGY is ScheduleStrategy.EARLY
    assert CompileConfig.build().schedule_strategy is ScheduleStrategy.EARLY
    cfg = CompileConfig.build(schedule_strategy="late")
    assert cfg.schedule_strategy is ScheduleStrategy.LATE
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.schedule_strategy = ScheduleStrategy.EARLY  # type: ignore[misc]
    assert parse_strategy("alternatives") is ScheduleStrategy.ALTERNATIVES
    with pytest.raises(ValueError, match="early, alternatives, late"):
        parse_strategy("sometimes")
    with pytest.raises(ValueError, match="unknown schedule strategy"):
        compile_model(chains([PLAIN]), schedule_strategy="never")


def test_without_structure_pressure_all_strategies_agree():
    """A model that fits and asks for nothing: the same fusion under every strategy."""
    model = chains([PLAIN, GROUPED])
    for s in ScheduleStrategy:
        r = compile_model(model, "bitwise", FLOAT, schedule_strategy=s.value)
        assert [x.verdict for x in r.sites] == [Status.PROVEN, Status.PROVEN], s
        assert all(x.applied for x in r.sites)
