"""Structural legality: every rule in both directions (a site it rejects, a site it lets through)."""

from __future__ import annotations

import numpy as np
import pytest
from models import matmul_activation, random_inputs

from compiler.api import compile_model
from compiler.errors import CompilerError
from compiler.frontend.reader import to_ir
from compiler.ir.context import Context
from compiler.ir.semantics import run_graph
from compiler.passes import legality
from compiler.passes.pipeline import PASSES
from npu_backend import codegen, simulator
from npu_backend.target import load_target
from prover.policy import Policy

FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")


def only_site(model, target=FLOAT, policy="bitwise", **kw):
    r = compile_model(model, policy, target, **kw)
    assert len(r.sites) == 1, [s.pattern for s in r.sites]
    return r, r.sites[0]


def fused_nodes(r):
    return [n for n in r.graph.nodes if n.op == "fused"]


def assert_unfused(r, site, code):
    assert site.verdict == "rejected"
    assert site.reason.code == code
    assert fused_nodes(r) == []
    # a rejected candidate leaves the graph exactly as the frontend (+cleanup) made it
    assert [n.op for n in r.graph.nodes] == [n.op for n in r.original.nodes]


def test_every_rule_has_a_docstring_reason():
    codes = [c for c, _ in legality.RULES]
    assert len(set(codes)) == len(codes) == 13
    for _, fn in legality.RULES:
        assert fn.__doc__ and len(fn.__doc__.split()) > 8


# -- not_adjacent ------------------------------------------------------------------------


def test_adjacent_positive():
    r, s = only_site(matmul_activation())
    assert s.verdict == "proven" and s.pattern == "matmul+sigmoid"
    assert [n.op for n in r.graph.nodes] == ["fused"]


def test_not_adjacent_negative_float_roundtrip_between():
    r, s = only_site(matmul_activation(float_roundtrip=True))
    assert_unfused(r, s, "not_adjacent")
    assert "'rt_dq'" in s.reason.message and "'act'" in s.reason.message


# -- intervening_requantize --------------------------------------------------------------


def test_requantize_reproduced_by_target_is_fused_and_proven():
    # MatMulInteger -> Requantize(double) -> Sigmoid on a fixed-point (double rounding) target
    r, s = only_site(matmul_activation(form="integer"), FIXED)
    assert s.pattern == "matmul+requantize+sigmoid"
    assert s.verdict == "proven" and s.obligations
    assert fused_nodes(r)[0].attrs["post"].requant.scheme == "fixed_double"


def test_requantize_not_reproducible_negative():
    r, s = only_site(matmul_activation(form="integer"), FLOAT)
    assert_unfused(r, s, "intervening_requantize")
    assert "'rq'" in s.reason.message


def test_second_requantize_after_qlinear_is_kept_where_no_table_absorbs_it():
    """The seed's refusal stands on a path that loads no table as given (npu_fixed): the
    postprocessor has one requantization stage and its toolchain builds only named
    functions, so nothing reproduces the second one."""
    r, s = only_site(matmul_activation(requantize=dict(multiplier=1 << 30, shift=0)), FIXED)
    assert_unfused(r, s, "intervening_requantize")
    assert "'rq' requantizes again" in s.reason.message
    assert "loads no table as given" in s.reason.message


@pytest.mark.parametrize(
    "rq",
    [dict(multiplier=1 << 30, shift=0), dict(multiplier=1518500250, shift=-1, zero_point=3)],
    ids=["half", "sqrt_half_zp3"],
)
def test_second_requantize_after_qlinear_is_absorbed_into_the_table(rq):
    """QLinearMatMul -> Requantize -> QLinearSigmoid on npu_float, whose MatMul path loads
    any 256-entry table: the second requantization maps one int8 code to one int8 code,
    so the table is T'[x] = sigmoid_table[rq(x)]; one fused MatMul, proven (the obligation
    is decided over every accumulator), and it computes what the original graph does."""
    m = matmul_activation(requantize=rq)
    r, s = only_site(m)
    assert s.pattern == "matmul+requantize+sigmoid" and s.verdict == "proven", s.reason
    assert [n.op for n in r.graph.nodes] == ["fused"]
    post = fused_nodes(r)[0].attrs["post"]
    assert post.function == "table" and post.lut.spec is None
    prog = codegen.generate(r.lowered, FLOAT)
    for seed in (0, 1):
        inp = random_inputs(m, seed)
        got = simulator.run(prog, inp)[0]["y"]
        np.testing.assert_array_equal(run_graph(r.original, inp)["y"], got)


def test_a_wrong_absorbed_requantize_is_refuted(monkeypatch):
    """Negative control: if the composed table applied the requantize wrongly (one code
    off), the obligation is refuted, never proven."""
    from compiler.ir import epilogue

    real = epilogue.composed_table

    def off_by_one(*a, **kw):
        v, spec = real(*a, **kw)
        v = v.copy()
        v[100] += 1
        return v, spec

    monkeypatch.setattr(epilogue, "composed_table", off_by_one)
    _, s = only_site(matmul_activation(requantize=dict(multiplier=1 << 30, shift=0)))
    assert s.verdict == "refuted"


# -- intervening_clip --------------------------------------------------------------------


def test_clip_composed_into_table_positive():
    r, s = only_site(matmul_activation(clip=(-20, 50)))
    assert s.verdict == "proven" and s.pattern == "matmul+clip+sigmoid"
    post = fused_nodes(r)[0].attrs["post"]
    # T'[x] = T[clip(x)]: the composed table is constant outside [-20, 50]
    t = np.asarray(post.lut.table)  # offset order on npu_float
    assert len(set(t[: -20 + 128])) == 1 and len(set(t[50 + 128 :])) == 1


def test_clip_on_accumulator_negative():
    r, s = only_site(matmul_activation(form="integer", clip_acc=(-3000, 3000)), FIXED)
    assert_unfused(r, s, "intervening_clip")
    assert "'clip_acc'" in s.reason.message


# -- multiple_users ----------------------------------------------------------------------


@pytest.mark.parametrize("extra", ["node", "output"])
def test_multiple_users_negative(extra):
    r, s = only_site(matmul_activation(extra_user=extra))
    assert_unfused(r, s, "multiple_users")
    assert ("'extra'" if extra == "node" else "graph output") in s.reason.message


def test_single_user_positive():
    _, s = only_site(matmul_activation(extra_user=None))
    assert s.verdict == "proven"


# -- already_fused -----------------------------------------------------------------------


def test_already_fused_negative_second_activation_kept():
    r = compile_model(matmul_activation(double_activation=True), "bitwise", FLOAT)
    first, second = r.sites
    assert first.verdict == "proven" and first.applied
    assert second.verdict == "rejected" and second.reason.code == "already_fused"
    ops = [(n.op, n.attrs.get("function") or n.attrs.get("post_function")) for n in r.graph.nodes]
    assert ops == [("fused", "sigmoid"), ("lut", "sigmoid")]  # the second is not dropped
    # the second activation is still a step of the lowered program
    assert any(getattr(st, "onnx_nodes", ()) == ("act2",) for st in r.lowered.steps)


def test_composed_tables_positive_only_as_proven_rewrite():
    r = compile_model(
        matmul_activation(double_activation=True), "bitwise", FLOAT, compose_tables=True
    )
    first, second = r.sites
    assert second.verdict == "proven" and second.applied and not first.applied
    assert [n.op for n in r.graph.nodes] == ["fused"]
    assert r.graph.nodes[0].origin == ("mm", "act", "act2")


# -- unsupported_function ----------------------------------------------------------------


def test_function_supported_on_conv_not_on_matmul_negative():
    assert (
        "tanh" in FIXED.compute("Conv").functions
        and "tanh" not in FIXED.compute("MatMul").functions
    )
    r, s = only_site(matmul_activation(activation="tanh", act_form="qdq"), FIXED)
    assert_unfused(r, s, "unsupported_function")
    assert "tanh" in s.reason.message


def test_function_supported_positive():
    _, s = only_site(matmul_activation(activation="tanh", act_form="qdq"), FLOAT)
    assert s.verdict == "proven" and s.pattern == "matmul+tanh"


# -- layout_mismatch ---------------------------------------------------------------------


def test_unit_dims_need_index_map_proof_positive():
    r, s = only_site(matmul_activation(reshape="unit"))
    assert s.verdict == "proven" and s.index_map
    assert len(s.obligations) == 2  # epilogue + index map
    assert r.graph.values["y"].shape == (1, 2, 8)


def test_hidden_transpose_negative_names_first_moved_index():
    r, s = only_site(matmul_activation(transpose=(1, 0)))
    assert_unfused(r, s, "layout_mismatch")
    assert "output index [0, 1] holds compute element [1, 0]" in s.reason.message


def test_permuting_reshape_negative():
    r, s = only_site(matmul_activation(reshape="permute", M=2, N=8))
    assert_unfused(r, s, "layout_mismatch")


# -- unsupported_intermediate_type -------------------------------------------------------


def test_intermediate_type_supported_positive():
    _, s = only_site(matmul_activation(inter_type="uint8", y_zp=128, out_zp=0), FLOAT)
    assert s.verdict == "proven"


def test_intermediate_type_unsupported_negative():
    # without synthesis (with it the compiler picks an int8 index: test_compiler_synthesis)
    r, s = only_site(
        matmul_activation(inter_type="uint8", y_zp=128, out_zp=0), FIXED, synthesis=False
    )
    assert_unfused(r, s, "unsupported_intermediate_type")
    assert "uint8" in s.reason.message


# -- grouped_codegen_unsupported ---------------------------------------------------------


def test_fusable_schedule_positive():
    r, s = only_site(matmul_activation(), FLOAT, schedule={"mm": "grouped"})
    assert s.verdict == "proven"
    assert r.lowered.steps[0].structure == "grouped" and r.lowered.steps[0].fused


def test_tiled_schedule_negative():
    r, s = only_site(matmul_activation(), FLOAT, schedule={"mm": "tiled"})
    assert_unfused(r, s, "grouped_codegen_unsupported")


# -- incomplete_parameters ---------------------------------------------------------------


def _pipeline_on(g, m, upto="rewrite"):
    ctx = Context(target=FLOAT, policy=Policy(0), model=m, original=g.clone())
    for name, fn in PASSES:
        fn(g, ctx)
        if name == upto:
            break
    return ctx


def test_complete_parameters_positive():
    g, m = to_ir(matmul_activation())
    ctx = _pipeline_on(g, m)
    assert ctx.sites[0].verdict == "proven"


def test_incomplete_parameters_negative():
    g, m = to_ir(matmul_activation())
    lut = next(n for n in g.nodes if n.op == "lut")
    lut.attrs["table"] = None
    ctx = _pipeline_on(g, m)
    s = ctx.sites[0]
    assert s.verdict == "rejected" and s.reason.code == "incomplete_parameters"
    assert "table" in s.reason.message
    assert not any(n.op == "fused" for n in g.nodes)
    with pytest.raises(CompilerError, match="table missing"):
        _pipeline_on(g, m, upto="lower")
