"""`compiler.ir.semantics.requant_scale`: a requantization's scale for one output column,
read the same way by the IR's meaning (`requant_term`, `requant_groups`), both sides of a
fused epilogue (`epilogue.build_columns`) and lowering. The copies it replaced differed:
the `before` side took a list of per-column scales, the `after` side and lowering only a
tuple (a list would have reached the target's requantizer whole)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from compiler.api import compile_model
from compiler.ir.epilogue import build_columns
from compiler.ir.semantics import requant_groups, requant_scale, requant_term
from npu_backend.target import load_target, requant_from_scale
from prover.terms import Var

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits"
FORMS = {"tuple": tuple, "list": list, "array": np.array}


@pytest.mark.parametrize("form", FORMS)
def test_per_column_forms_agree(form):
    scales = (0.5, 0.25, 0.5, 0.125)
    rq = {"scheme": "float", "scale": FORMS[form](scales), "zp": 3, "out": "int8"}
    assert [requant_scale(rq, j) for j in range(4)] == list(scales)
    assert requant_groups(rq, 4) == [(0, 2), (1,), (3,)]
    terms = [requant_term(Var("acc"), rq, j) for j in range(4)]
    assert terms[0] == terms[2] and terms[0] != terms[1]


def test_one_scale_for_every_column():
    rq = {"scheme": "float", "scale": 0.5, "zp": 0, "out": "uint8"}
    assert [requant_scale(rq, j) for j in (0, 7)] == [0.5, 0.5]
    assert requant_groups(rq, 3) == [(0, 1, 2)]
    fixed = {"scheme": "double", "multiplier": 1 << 30, "shift": 0, "zp": 0, "out": "int8"}
    assert requant_groups(fixed, 2) == [(0, 1)]


@pytest.mark.parametrize("target", ["npu_float", "npu_fixed"])
def test_fused_epilogue_reads_per_column_scales_in_any_form(target):
    """The per-channel digits site's column groups (both sides) are the same whether its
    scales are a tuple (as the frontend stores them), a list or an array."""
    t = load_target(ROOT / "npu_backend" / "targets" / f"{target}.toml")
    r = compile_model(DIGITS / "digits_matmul_qop_s8s8_pc.onnx", "bitwise", t, synthesis=False)
    site = next(s for s in r.sites if s.compute.attrs.get("requant") is not None)
    rq = site.compute.attrs["requant"]
    assert isinstance(rq["scale"], tuple) and len(set(rq["scale"])) > 1
    want = build_columns(site, t)
    assert len(want) > 1  # per-channel scales: more than one group
    for form in ("list", "array"):
        site.compute.attrs["requant"] = {**rq, "scale": FORMS[form](rq["scale"])}
        got = build_columns(site, t)
        assert [(g.columns, g.before, g.post, g.acc_offset) for g in got] == [
            (g.columns, g.before, g.post, g.acc_offset) for g in want
        ], form
    site.compute.attrs["requant"] = rq


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_groups_are_equal_scales_in_column_order(n):
    """The groups (their order, each one's columns) are those of grouping equal scales in
    column order, for repeated scales, float32 arrays, and scales longer than the columns."""

    def _requant_groups_one_by_one(rq, n):
        groups: dict[float, list[int]] = {}
        for j in range(n):
            groups.setdefault(float(rq["scale"][j]), []).append(j)
        return [tuple(v) for v in groups.values()]

    rng = np.random.default_rng(n)
    for pool in (3, n + 5):
        scales = rng.choice(rng.uniform(1e-4, 1.0, pool), size=n + 2)
        for form in (tuple, np.float32, list):
            value = tuple(scales) if form is tuple else (
                np.asarray(scales, np.float32) if form is np.float32 else list(scales))  # fmt: skip
            rq = {"scheme": "float", "scale": value, "zp": 0, "out": "int8"}
            assert requant_groups(rq, n) == _requant_groups_one_by_one(rq, n)
    nan = {"scheme": "float", "scale": (0.5, float("nan"), 0.5, float("nan")), "zp": 0,
           "out": "int8"}  # fmt: skip
    assert requant_groups(nan, 4) == [(0, 2), (1,), (3,)]  # each NaN a group, as before
    short = {"scheme": "float", "scale": (0.5, 0.25), "zp": 0, "out": "int8"}
    with pytest.raises(IndexError):
        requant_groups(short, 3)


def test_every_columns_scale_at_once_is_each_columns_scale_alone():
    """The frontend computes ORT's float32 requantization scale for all columns in one
    array operation: each equals the per-column float32 product and quotient, and a bad
    weight scale is still named."""
    from compiler.errors import FrontendError
    from compiler.frontend.ops.integer_matmul import requant_scales
    from prover.requant import onnx_requant_scale

    class Ctx:
        def bad(self, n, msg):
            return FrontendError(msg)

    rng = np.random.default_rng(7)
    for _ in range(50):
        a, y = (float(v) for v in 10.0 ** rng.uniform(-6, 1, 2))
        bs = tuple(float(v) for v in 10.0 ** rng.uniform(-8, 2, 300))
        got = requant_scales(Ctx(), None, a, bs, y)
        assert got == tuple(float(onnx_requant_scale(a, b, y)) for b in bs)
    with pytest.raises(FrontendError, match="weight scale -0.5 must be finite and positive"):
        requant_scales(Ctx(), None, 0.1, (0.2, -0.5, float("nan")), 0.3)
    with pytest.raises(FrontendError, match="requantization scale"):
        requant_scales(Ctx(), None, 1e-30, (1e-30,), 1e30)  # underflows to 0 in float32


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "qlinear_add_bias"])
def test_columns_built_from_the_first_ones_template_are_their_own_epilogues(bias, monkeypatch):
    """Per channel without a bias, every column after the first gets the first one's
    `before` with its own scale (no term built and hashed per column); with a bias each is
    built alone. Either way each group's `before` is the one its column builds alone and
    each scale has its own group; a fill that gave another term is caught, not proven."""
    from models import matmul_activation

    import compiler.ir.column_group as cg
    import compiler.ir.epilogue as ep
    from compiler.errors import InternalError

    t = load_target(ROOT / "npu_backend" / "targets" / "npu_float.toml")
    m = DIGITS / "digits_matmul_qop_s8s8_pc.onnx" if bias else matmul_activation(per_channel=True)
    r = compile_model(m, "bitwise", t, synthesis=False)
    site = next(s for s in r.sites if s.compute.attrs.get("requant") is not None)
    rq, view = site.compute.attrs["requant"], ep.bias_view(site)
    assert (view is not None) == bias
    fills: list[float] = []
    real = cg.fill
    monkeypatch.setattr(cg, "fill", lambda tmpl, s: fills.append(s) or real(tmpl, s))
    groups = build_columns(site, t)
    assert sum(len(g.columns) for g in groups) == len(rq["scale"])
    assert len(groups) > 2
    if not bias:  # one group per distinct scale, all but the first filled, on first read
        assert len(groups) == len(set(rq["scale"])) and fills == [groups[-1].scale]
        assert all(isinstance(g, cg.FilledGroup) for g in groups[1:])
        assert not any("before" in g.__dict__ for g in groups[1:-1])
    else:
        assert not fills
    for g in groups:
        for j in g.columns:
            assert g.before == ep.chain_term(site, requant_term(Var("acc"), rq, j), j, view)
    assert len(fills) == (len(groups) - 1 if not bias else 0)
    if not bias:  # each column's post: the first one's with the column's own requantizer
        caps = t.compute("MatMul")
        assert caps is not None
        for g in groups:
            for j in g.columns:
                own = requant_from_scale(rq["scale"][j], rq["zp"], rq["out"], caps.requant_scheme)
                assert g.post == dataclasses.replace(groups[0].post, requant=own)
        # columns sharing a scale share its group, wherever they are
        n = len(rq["scale"])
        site.compute.attrs["requant"] = {**rq, "scale": tuple(rq["scale"][j % 5] for j in range(n))}
        shared = build_columns(site, t)
        assert [g.columns for g in shared] == [tuple(range(k, n, 5)) for k in range(5)]
        assert [g.post for g in shared] == [g.post for g in groups[:5]]
        site.compute.attrs["requant"] = rq
    if not bias:
        monkeypatch.setattr(cg, "fill", lambda tmpl, s: real(tmpl, s * 2))  # a wrong fill
        with pytest.raises(InternalError, match="is not its scale's fill"):
            build_columns(site, t)


@pytest.mark.parametrize("scheme", ["float32", "fixed_double", "fixed_single"])
def test_requantizers_made_at_once_are_the_ones_made_one_by_one(scheme):
    """`requant_from_scales` (a per-channel op's columns) gives each column the requantizer
    `requant_from_scale` gives it alone: the same float32 rounding of each scale, bit for
    bit, or the same fixed-point multiplier and shift."""
    from npu_backend.target import requant_from_scale, requant_from_scales

    rng = np.random.default_rng(11)
    scales = [float(v) for v in 10.0 ** rng.uniform(-9, 1, 400)] + [1 / 3, 0.1, 2.0**-149]
    got = requant_from_scales(scales, 3, "int8", scheme)
    want = [requant_from_scale(s, 3, "int8", scheme) for s in scales]
    assert got == want
    bits = [np.float64(r.scale).view(np.int64) for r in got if r.scale is not None]
    assert bits == [np.float64(r.scale).view(np.int64) for r in want if r.scale is not None]
