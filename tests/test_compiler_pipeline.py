"""Pipeline: fixed pass order, idempotency on every test model, pass ordering, end to end."""

from __future__ import annotations

import numpy as np
import pytest
from models import matmul_activation, random_inputs, two_sites

from compiler.api import compile_model, recompile
from compiler.ir.semantics import run_graph
from compiler.ort.tables import session
from compiler.passes.pipeline import PASSES
from npu_backend import codegen, simulator
from npu_backend.lowered import HostKernel, HostOnnx, NpuLut, NpuMatMul
from npu_backend.target import load_target

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")

MODELS = {
    "plain": dict(),
    "integer": dict(form="integer"),
    "clip": dict(clip=(-20, 50)),
    "per_channel": dict(per_channel=True),
    "multi_user": dict(extra_user="node"),
    "output_user": dict(extra_user="output"),
    "double": dict(double_activation=True),
    "noop_reshape": dict(reshape="noop"),
    "unit_reshape": dict(reshape="unit"),
    "permute": dict(reshape="permute"),
    "transpose": dict(transpose=(1, 0)),
    "float_input": dict(float_input=True),
    "qdq_act": dict(act_form="qdq", activation="tanh"),
    "qdq_matmul": dict(form="qdq"),
    "roundtrip": dict(float_roundtrip=True),
    "requantize_again": dict(requantize=dict(multiplier=1 << 30, shift=0)),
}


def test_pass_order_is_fixed_and_documented():
    import compiler.passes.pipeline as p

    names = [n for n, _ in PASSES]
    assert names == [
        "cleanup",
        "propose",
        "legality",
        "gate",
        "schedule_strategy",
        "rewrite",
        "lower",
        "tile_columns",
    ]
    doc = p.__doc__
    assert [doc.index(f"{i}. {n}") for i, n in enumerate(names, 1)] == sorted(
        doc.index(f"{i}. {n}") for i, n in enumerate(names, 1)
    )


def _steps(lowered):
    return [(type(s).__name__, s.name, getattr(s, "onnx_nodes", ())) for s in lowered.steps]


@pytest.mark.parametrize("target", [FLOAT, FIXED], ids=["float", "fixed"])
@pytest.mark.parametrize("name", list(MODELS))
def test_idempotent(name, target):
    r = compile_model(matmul_activation(**MODELS[name]), "bitwise", target)
    again = recompile(r)
    assert again.graph.fingerprint() == r.graph.fingerprint()
    assert all(s.verdict != "proven" or not s.applied for s in again.sites)
    assert _steps(again.lowered) == _steps(r.lowered)
    assert all(line.endswith("unchanged") for line in again.log)


def test_idempotent_with_composed_tables_and_two_sites():
    for r in (
        compile_model(
            matmul_activation(double_activation=True), "bitwise", FLOAT, compose_tables=True
        ),
        compile_model(two_sites(), "bitwise", FLOAT),
    ):
        assert recompile(r).graph.fingerprint() == r.graph.fingerprint()


def test_pass_ordering_cleanup_opens_requantize_closes():
    plain = compile_model(matmul_activation(), "bitwise", FLOAT)
    reshaped = compile_model(matmul_activation(reshape="noop"), "bitwise", FLOAT)
    # (on npu_fixed, whose MatMul path loads no table that could absorb the Requantize)
    closed = compile_model(
        matmul_activation(reshape="noop", requantize=dict(multiplier=1 << 30, shift=0)),
        "bitwise",
        FIXED,
    )
    # the redundant Reshape sits between MatMul and Sigmoid in the original IR ...
    assert [n.op for n in reshaped.original.nodes] == ["matmul", "reshape", "lut"]
    # ... cleanup removed it first, so the fusion opened
    assert reshaped.log[0] == "cleanup: changed" and plain.log[0] == "cleanup: unchanged"
    assert reshaped.sites[0].verdict == "proven" and reshaped.sites[0].pattern == "matmul+sigmoid"
    assert [n.op for n in reshaped.graph.nodes] == ["fused"]
    assert [type(s).__name__ for s in reshaped.lowered.steps] == ["NpuMatMul"]
    # a necessary Requantize between them closes it, and the artifact says why
    s = closed.sites[0]
    assert s.pattern == "matmul+requantize+sigmoid" and s.verdict == "rejected"
    assert s.reason.code == "intervening_requantize"
    assert [n.op for n in closed.graph.nodes] == ["matmul", "requantize", "lut"]
    assert any(d.code == "intervening_requantize" and "rq" in d.nodes for d in closed.diagnostics)


def _reference(m, r, inp):
    if any(n.domain == "ai.npufusion" for n in m.graph.node):
        return run_graph(r.original, inp)
    return dict(zip([o.name for o in m.graph.output], session(m).run(None, inp), strict=True))


def _boundary_inputs(m):
    base = random_inputs(m, 0)
    out = [base]
    for v in (-128, 127, 0):
        out.append(
            {k: np.full_like(a, v if a.dtype != np.float32 else v / 40) for k, a in base.items()}
        )
    return out


@pytest.mark.parametrize("target", [FLOAT, FIXED], ids=["float", "fixed"])
@pytest.mark.parametrize(
    "name",
    [
        "plain",
        "integer",
        "clip",
        "per_channel",
        "multi_user",
        "double",
        "unit_reshape",
        "float_input",
        "qdq_act",
        "qdq_matmul",
    ],
)
def test_bitwise_program_equals_onnxruntime(name, target):
    m = matmul_activation(K=32, N=8, **MODELS[name])
    r = compile_model(m, "bitwise", target)
    prog = codegen.generate(r.lowered, target)
    for seed, inp in enumerate(_boundary_inputs(m) + [random_inputs(m, s) for s in (1, 2)]):
        ref = _reference(m, r, inp)
        out, _ = simulator.run(prog, inp)
        for k, v in ref.items():
            np.testing.assert_array_equal(
                np.asarray(v), out[k], err_msg=f"{name} input {seed} output {k}"
            )


def test_bounded_program_within_one_step():
    m = matmul_activation(K=64, N=16, y_scale=0.01)
    r = compile_model(m, "bounded:1", FIXED)
    assert r.sites[0].verdict == "proven"
    prog = codegen.generate(r.lowered, FIXED)
    worst = 0
    for seed in range(5):
        inp = random_inputs(m, seed)
        ref = _reference(m, r, inp)
        out, _ = simulator.run(prog, inp)
        worst = max(
            worst, int(np.max(np.abs(ref["y"].astype(np.int64) - out["y"].astype(np.int64))))
        )
    assert worst <= 1


def test_unproven_lowering_stays_on_host_with_diagnostic():
    # fixed-point requantization of QLinearMatMul is refuted under bitwise: host it, and the table too
    r = compile_model(matmul_activation(K=64, N=16, extra_user="node"), "bitwise", FIXED)
    kinds = {s.onnx_nodes: type(s) for s in r.lowered.steps}
    assert kinds[("mm",)] is HostOnnx
    d = [d for d in r.diagnostics if d.nodes == ["mm"]]
    assert d and d[0].code == "refuted" and "stays on the host" in d[0].message and d[0].action
    # on the float target the same op is proven and placed on the NPU
    r2 = compile_model(matmul_activation(K=64, N=16, extra_user="node"), "bitwise", FLOAT)
    kinds2 = {s.onnx_nodes: type(s) for s in r2.lowered.steps}
    assert kinds2[("mm",)] is NpuMatMul and kinds2[("act",)] in (NpuLut, HostKernel)


def test_a_fused_nodes_column_terms_are_built_when_read():
    """A fused node keeps its groups' epilogue terms unbuilt until the IR's evaluator reads
    them (a check never does): per channel, one term per column would be built for nothing.
    Read, they are each group's epilogue, and the fused graph still computes ORT's output."""
    from compiler.ir.column_group import epilogue_term
    from compiler.ir.fuse import ColumnTerms
    from prover.terms import Var

    m = matmul_activation(per_channel=True)
    r = compile_model(m, "bitwise", FLOAT)
    (fused,) = [n for n in r.graph.nodes if n.op == "fused"]
    terms = fused.attrs["groups"]
    assert isinstance(terms, ColumnTerms) and terms._items is None
    assert len(terms) == len(r.sites[0].post) > 1 and terms._items is None  # not built yet
    want = [(tuple(g.columns), epilogue_term(g.post, Var("acc"))) for g in r.sites[0].post]
    assert list(terms) == want and terms == want and terms != want[:-1]
    inp = random_inputs(m, 0)
    ref = session(m, "default").run(None, inp)[0]
    np.testing.assert_array_equal(ref, run_graph(r.graph, inp)["y"])
