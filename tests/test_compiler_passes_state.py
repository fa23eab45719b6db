"""Passes talk through the IR, a frozen config and an explicit state; work is done once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from models import matmul_activation, two_sites

import compiler.passes.pipeline as pipeline
import compiler.proving.prove as prove
from compiler.api import compile_model, recompile
from compiler.ir import npu_step
from compiler.ir.context import CheckOptions, CompileConfig, Context
from compiler.passes.pipeline import PASSES
from npu_backend.lowered import NpuMatMul
from npu_backend.target import load_target
from prover.inttypes import int_type
from prover.matmul import accumulator_range
from prover.policy import Policy

FIXED = load_target("npu_backend/targets/npu_fixed.toml")
FLOAT = load_target("npu_backend/targets/npu_float.toml")
PASSES_DIR = Path(pipeline.__file__).parent


def test_config_is_frozen_and_normalised_once():
    r = compile_model(matmul_activation(), "bounded:1", "npu_backend/targets/npu_fixed.toml")
    cfg = r.context.config
    assert isinstance(cfg.policy, Policy) and str(cfg.policy) == "bounded:1"
    assert cfg.target.name == "npu_fixed" and cfg.reference.name == "onnx"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.jobs = 4  # type: ignore[misc]
    with pytest.raises(AttributeError, match="configuration"):
        r.context.policy = Policy(0)
    with pytest.raises(TypeError):
        cfg.schedule["mm"] = "tiled"  # type: ignore[index]
    # the flat names read the same fields; state fields stay assignable
    assert r.context.policy is cfg.policy and r.context.timeout_s == cfg.check.timeout_s
    assert r.context.sites is r.context.state.sites


def test_context_from_flat_fields_and_unknown_field():
    ctx = Context(target=FIXED, policy="bitwise", jobs=2, solver="segments")
    assert ctx.config.jobs == 2 and ctx.config.check.solver == "segments"
    assert ctx.solver == "segments" and ctx.sites == []
    with pytest.raises(TypeError, match="unknown field"):
        Context(target=FIXED, polcy="bitwise")
    cfg = CompileConfig.build(schedule={"mm": "grouped"})
    assert cfg.structure_of(("x", "mm")) == "grouped" and cfg.structure_of(("x",)) == "plain"


@pytest.mark.parametrize("jobs", [1, 2])
def test_obligations_built_once_per_site(monkeypatch, jobs):
    built = []
    real = prove._build
    monkeypatch.setattr(prove, "_build", lambda g, s, c: built.append(s.id) or real(g, s, c))
    r = compile_model(two_sites(), "bitwise", FLOAT, jobs=jobs)
    assert [s.verdict for s in r.sites] == ["proven", "proven"]
    assert sorted(built) == ["site-0", "site-1"]
    # decided once per hash: every site obligation is in the state's verdicts
    for s in r.sites:
        assert all(h in r.context.state.verdicts for h in s.obligations)


def test_kept_obligations_follow_the_site_groups_not_their_ids():
    """A site's obligations are served from the state only while its groups are the same
    objects; a replaced group (synthesis does this) gets obligations built again."""
    r = compile_model(two_sites(), "bitwise", FLOAT)
    ctx, site = r.context, r.context.state.sites[0]
    g = r.original
    first = prove.site_obligations(g, site, ctx)
    assert prove.site_obligations(g, site, ctx) is first
    site.post = [dataclasses.replace(site.post[0]), *site.post[1:]]
    again = prove.site_obligations(g, site, ctx)
    assert again is not first
    assert [ob.hash for ob, *_ in again] == [ob.hash for ob, *_ in first]


def test_small_work_never_starts_workers(monkeypatch):
    import prover.parallel as par

    def no_pool(*a, **k):
        raise AssertionError("worker pool started for a few millisecond obligations")

    par.shutdown()  # two sites: too little work to start workers early, or later
    monkeypatch.setattr(par, "check_many", no_pool)
    monkeypatch.setattr(par, "start", no_pool)
    one = compile_model(two_sites(), "bitwise", FLOAT, jobs=1)
    two = compile_model(two_sites(), "bitwise", FLOAT, jobs=2)
    assert [s.verdict for s in one.sites] == [s.verdict for s in two.sites]
    assert par.running() == 0


def test_large_work_goes_to_workers_with_the_same_verdicts(monkeypatch):
    sent, decided_by = [], set()
    import prover.parallel as par

    real_many, real_check = par.check_many, par.check
    monkeypatch.setattr(
        par, "check_many", lambda obs, j, **o: sent.append(len(obs)) or real_many(obs, j, **o)
    )
    monkeypatch.setattr(
        par, "check", lambda ob, **o: decided_by.add(ob.hash) or real_check(ob, **o)
    )
    par.start(1)
    assert par.wait_ready(60) == 1  # a ready worker is always handed the first chunk
    handed = par.COUNTS["workers"]
    # per-channel scales: one obligation per column; refuted on the fixed-point target
    m = matmul_activation(K=16, N=6, M=1, per_channel=True)
    two = compile_model(m, "bitwise", FIXED, jobs=2, synthesis=False)
    one = compile_model(m, "bitwise", FIXED, jobs=1, synthesis=False)
    n = len(two.sites[0].obligations)
    assert n >= 4 and sent == [n]  # workers started early: the whole batch is shared
    # the worker was handed a share (decided there, or here too if it was slower); this
    # process decided the rest (the worker's calls are not seen here)
    assert 0 < par.COUNTS["workers"] - handed < n and decided_by and par.running() == 1
    for a, b in zip(one.sites, two.sites, strict=True):
        assert (a.verdict, a.obligation_hash, a.max_diff, a.obligations) == (
            b.verdict,
            b.obligation_hash,
            b.max_diff,
            b.obligations,
        )
        assert a.counterexample.assignment == b.counterexample.assignment
    assert {s.verdict for s in two.sites} == {"refuted"}
    for h in one.sites[0].obligations:  # every verdict, whoever decided it
        va, vb = one.context.state.verdicts[h], two.context.state.verdicts[h]
        assert (va.status, va.max_diff, va.counterexample) == (
            vb.status,
            vb.max_diff,
            vb.counterexample,
        )


def test_validated_step_is_the_emitted_step(monkeypatch):
    seen: list[NpuMatMul] = []
    real = npu_step.validation_issues
    monkeypatch.setattr(
        npu_step, "validation_issues", lambda step, t: seen.append(step) or real(step, t)
    )
    r = compile_model(matmul_activation(K=16, N=8), "bitwise", FLOAT)
    assert r.sites[0].verdict == "proven"
    (emitted,) = [s for s in r.lowered.steps if isinstance(s, NpuMatMul)]
    assert seen and all(step == emitted for step in seen)


def test_accumulator_range_is_stored_on_the_ir():
    r = compile_model(matmul_activation(K=16, N=8, a_zp=3, seed=4), "bitwise", FIXED)
    (mm,) = [n for n in r.original.nodes if n.op == "matmul"]
    a = mm.attrs
    want = accumulator_range(
        a["w"], np.asarray(a["w_zp"]), int_type(a["a_type"]), int(a["a_zp"]), a["bias"]
    )
    assert a["acc_range"] == want
    # a fused node (its bias may fold a QLinearAdd) carries no stale range
    assert all("acc_range" not in n.attrs for n in r.graph.nodes if n.op == "fused")
    assert all(line.endswith("unchanged") for line in recompile(r).log)


def test_passes_dir_holds_only_passes():
    """Shared helpers live outside `compiler/passes/` (ir/, proving/, ort/), so the import
    check of `tests/test_import_layers.py` (passes do not import each other) covers every
    module there."""
    modules = {p.stem for p in PASSES_DIR.glob("*.py")} - {"__init__", "pipeline"}
    assert modules == {name for name, _ in PASSES}


def test_table_terms_built_once_equal_the_kernel_form():
    from compiler.ir.graph import Node
    from compiler.ir.semantics import node_term
    from prover.terms import Var, op, term_hash

    table = tuple(np.arange(-128, 128, dtype=np.int64)[::-1])  # numpy ints, as read
    n = Node("act", "lut", ["x"], ["y"], {"table": table, "in_type": "int8"})
    for x in (Var("acc"), op("requant_float", Var("acc"), scale=0.5, zp=3, out="int8")):
        got, want = node_term(n, x), op("lut", x, table=table, in_type="int8", index_order="offset")
        assert got == want and term_hash(got) == term_hash(want)
        assert all(type(v) is int for v in got.kwargs["table"])


def _modules_after_check(model: str, *args: str) -> set[str]:
    import subprocess
    import sys

    heavy = ("onnxruntime", "z3", "cvc5", "bitwuzla", "matplotlib", "compiler.report.html")
    code = (
        "import sys\nfrom compiler.cli.prover import main\n"
        f"rc = main(['check', {model!r}, '--proofs-mode', 'off', '--no-progress', *{args!r}])\n"
        f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rc, loaded = p.stdout.strip().splitlines()[-1].split(" ", 1)
    return int(rc), set(eval(loaded))  # a list literal printed by the probe


def test_a_proven_check_loads_no_onnxruntime_and_no_solver_but_a_replay_does():
    rc, loaded = _modules_after_check("examples/matmul_sigmoid.onnx")
    assert rc == 0 and loaded == set()
    rc, loaded = _modules_after_check("examples/showcase.onnx")  # a refutation is replayed
    assert rc == 1 and "onnxruntime" in loaded


def _site_verdicts(r) -> list[tuple]:
    (s,) = r.sites
    vs = [r.context.state.verdicts[h] for h in s.obligations]
    return [s.verdict, *((v.status, v.max_diff, v.solver) for v in vs)]


def test_a_per_channel_site_is_decided_with_prefetched_thresholds(monkeypatch):
    import prover.segments as seg

    m = matmul_activation(K=16, N=48, M=1, per_channel=True)
    seg.clear_shared_steps()
    # segments named: every column decided; the fixed-point target's epilogues are not
    # the model's terms (float32 targets' are: decided at once, `prover.reflexive`)
    r = compile_model(m, "bounded:1", FIXED, solver="segments")
    assert len(r.sites[0].obligations) > 1 and seg._PREFETCHED  # the gate prefetched
    monkeypatch.setattr(prove, "PREFETCHING_SOLVERS", frozenset())
    seg.clear_shared_steps()
    alone = compile_model(m, "bounded:1", FIXED, solver="segments")
    assert not seg._PREFETCHED
    assert _site_verdicts(r) == _site_verdicts(alone)


def test_prefetch_only_for_a_batch_segments_decides():
    m = matmul_activation(K=16, N=48, M=1, per_channel=True)
    r = compile_model(m, "bounded:1", FIXED, solver="segments")
    ctx = r.context
    obs = [ob for ob, _, _ in ctx.state.obligations[r.sites[0].id][1]]
    import prover.segments as seg

    seg.clear_shared_steps()
    assert prove.prefetch(obs[:1], ctx) == 0  # one epilogue: nothing to share
    z3 = Context(dataclasses.replace(ctx.config, check=CheckOptions(solver="z3")), ctx.state)
    assert prove.prefetch(obs, z3) == 0
    assert prove.prefetch(obs, ctx) > 0


def test_prefetch_leaves_out_obligations_whose_sides_are_the_same_terms():
    """Sides that are the same terms are decided at once (`prover.reflexive`): no
    thresholds are computed for them; the same batch with other sides is prefetched."""
    import prover.segments as seg
    from prover.obligation import Obligation

    m = matmul_activation(K=16, N=48, M=1, per_channel=True)
    r = compile_model(m, "bounded:1", FIXED, solver="segments")
    ctx = r.context
    obs = [ob for ob, _, _ in ctx.state.obligations[r.sites[0].id][1]]
    assert all(ob.outputs_before != ob.outputs_after for ob in obs)
    same = [Obligation(ob.kind, ob.before, ob.before, ob.ranges, ob.policy) for ob in obs]
    seg.clear_shared_steps()
    assert prove.prefetch(same, ctx) == 0 and not seg._PREFETCHED
    assert prove.prefetch(obs, ctx) > 0 and seg._PREFETCHED
    fresh = Context(ctx.config, dataclasses.replace(ctx.state, verdicts={}))
    v = prove.check(same[0], fresh)
    assert v.status.value == "proven" and v.details["procedures"][0]["closed_form"] == "identical"
