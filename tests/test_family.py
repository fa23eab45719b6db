"""Column families (`prover.family`): templates with a scale hole, identities decided
vectorised, members equal to the per-column obligations, and the lowering pass using them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from models import matmul_activation

from compiler.api import compile_model
from compiler.proving import prove
from npu_backend.lowered import HostKernel, HostOnnx, NpuMatMul
from npu_backend.target import load_target
from prover.api import check
from prover.family import _floats_text, family, fill, from_terms, matches, total_template, with_hole
from prover.policy import Policy
from prover.terms import Var, op

ACC = Var("acc")
TABLE = tuple(range(256))


def _rq(scale: float, zp: int = 0, out: str = "int8"):
    return op("requant_float", ACC, scale=scale, zp=zp, out=out)


def _lut(x, in_type: str = "int8"):
    return op("lut", x, table=TABLE, in_type=in_type, index_order="offset")


def test_a_hole_is_the_one_float_scale_and_filling_it_gives_the_term_back():
    t = _lut(op("clip", _rq(0.0123), lo=-100, hi=100))
    template, scale = with_hole(t)
    assert scale == 0.0123 and template != t
    assert fill(template, scale) == t
    assert fill(template, 0.5) == _lut(op("clip", _rq(0.5), lo=-100, hi=100))
    assert with_hole(ACC) is None  # no requant_float
    two = op("add", _rq(0.1), _rq(0.2))
    assert with_hole(two) is None  # two of them: not one hole


def test_a_fixed_point_requantization_has_no_hole():
    t = op("requant_double", ACC, multiplier=1 << 30, shift=0, zp=0, out="int8")
    assert with_hole(t) is None and with_hole(_lut(t)) is None


def test_from_terms_needs_every_member_to_be_the_first_ones_template():
    b = [_lut(_rq(s)) for s in (0.01, 0.02, 0.03)]
    fam = from_terms("epilogue", "acc", b, b, [-5, -6, -7], [5, 6, 7], [0, 1, 2], Policy(0))
    assert fam is not None and len(fam) == 3
    for i in range(3):
        ob = fam.column(i)
        assert ob.before == b[i] and ob.after == b[i] and ob.ranges == {"acc": (-5 - i, 5 + i)}
    other = b[:2] + [_lut(op("clip", _rq(0.03), lo=0, hi=9))]
    assert (
        from_terms("epilogue", "acc", other, other, [0] * 3, [1] * 3, [0, 1, 2], Policy(0)) is None
    )


def test_identities_are_members_whose_two_sides_are_one_total_term():
    t, _ = with_hole(_lut(_rq(0.01)))
    fam = family(
        "epilogue",
        "acc",
        t,
        t,
        [0.01, 0.02, 0.03, 0.0, np.inf, 0.05],
        [0.01, 0.025, 0.03, 0.0, np.inf, 0.05],
        [-10, -10, -(2**31) - 1, 0, 0, 5],
        [10, 10, 0, 1, 1, 4],
        range(6),
        Policy(0),
    )
    # equal; scales differ; range leaves int32; scale 0 and inf are kernel errors; empty range
    assert fam.identities().tolist() == [True, False, False, False, False, False]


@pytest.mark.parametrize(
    "term",
    [
        _lut(_rq(0.01, out="int16")),  # the table's index can leave its input type
        _lut(op("add", _rq(0.01), ACC)),  # the variable reaches another op
        op("clip", _rq(0.01), lo=5, hi=1),  # a clip whose limits the kernel rejects
        _rq(0.01, zp=300),  # a zero point outside the output type
        op("lut", _rq(0.01), table=TABLE[:255], in_type="int8", index_order="offset"),  # short
    ],
)
def test_a_template_with_a_partial_op_is_never_an_identity(term):
    t, s = with_hole(term)
    assert not total_template(t, "acc")
    fam = family("epilogue", "acc", t, t, [s], [s], [-3], [3], [0], Policy(0))
    assert not fam.identities().any()


def test_an_identity_member_is_what_the_decision_procedures_prove():
    rng = np.random.default_rng(0)
    t, _ = with_hole(_lut(op("clip", _rq(0.01), lo=-50, hi=90)))
    scales = rng.uniform(1e-4, 0.05, 8).astype(np.float32).astype(np.float64)
    lo = rng.integers(-200_000, 0, 8)
    hi = rng.integers(0, 200_000, 8)
    fam = family("epilogue", "acc", t, t, scales, scales, lo, hi, range(8), Policy(0))
    assert fam.identities().all()
    for i in range(8):
        v = check(fam.column(i), solver="auto")
        assert v.proven and v.max_diff == 0 and v.solver != "identity"


def test_a_member_that_is_no_identity_keeps_its_own_verdict():
    # the model's float64 scale against the target's float32 rounding of it
    s64 = 0.1 + 1e-12
    t_b, _ = with_hole(_rq(s64))
    fam = family(
        "lowering",
        "acc",
        t_b,
        t_b,
        [s64],
        [float(np.float32(s64))],
        [-(2**20)],
        [2**20],
        [0],
        Policy(0),
    )
    assert not fam.identities().any()
    assert check(fam.column(0)).status in ("proven", "refuted")


def test_the_hash_names_the_members_and_not_the_note():
    t, _ = with_hole(_rq(0.01))
    a = family(
        "lowering", "acc", t, t, [0.01, 0.02], [0.01, 0.02], [0, 0], [5, 6], [0, 1], Policy(0)
    )
    b = family(
        "lowering",
        "acc",
        t,
        t,
        [0.01, 0.02],
        [0.01, 0.02],
        [0, 0],
        [5, 6],
        [0, 1],
        Policy(0),
        note="x",
    )
    c = family(
        "lowering", "acc", t, t, [0.01, 0.02], [0.01, 0.02], [0, 0], [5, 7], [0, 1], Policy(0)
    )
    assert a.hash == b.hash != c.hash
    assert (
        a.hash
        != family(
            "lowering", "acc", t, t, [0.01, 0.02], [0.01, 0.02], [0, 0], [5, 6], [0, 1], Policy(1)
        ).hash
    )
    assert matches(a, 1, _rq(0.02), _rq(0.02)) and not matches(a, 1, _rq(0.01), _rq(0.02))


def test_the_canonical_text_is_the_canonical_json_of_the_family():
    """The text the hash is taken of is spliced from the templates' own texts: it equals
    the canonical encoding of `to_json()`, so a family keeps its hash."""
    import json

    from prover import terms as T

    pairs = [
        (_rq(0.01), _rq(0.01)),
        (_lut(op("clip", _rq(0.0123), lo=-100, hi=100)), _lut(_rq(0.0123, zp=-3))),
    ]
    # the scales differ; are equal (an identity's, written once); differ in a zero's sign
    scales = [([0.5, 0.25], [0.5, 0.125]), ([0.5, 0.25], [0.5, 0.25]), ([0.0, 1.0], [-0.0, 1.0])]
    for before, after in pairs:
        for sb, sa in scales:
            tb, _ = with_hole(before)
            ta, _ = with_hole(after)
            fam = family(
                "epilogue", "acc", tb, ta, sb, sa, [-9, 0], [9, 70000], [3, 4],
                Policy(1), note="not hashed",
            )  # fmt: skip
            want = T.canonical(fam.to_json())
            assert fam.canonical == want and json.loads(fam.canonical) == fam.to_json()
            assert fam.subset(np.array([True, True])) is fam  # all of it: hashed once
            part = fam.subset(np.array([False, True]))
            assert part.columns.tolist() == [4] and part.hash != fam.hash
    # the float lists as the encoder writes them, signed zeros and non-finite values too
    values = [0.5, -0.0, 0.0, 0.5, float("nan"), float("inf"), -float("inf"), 1e-300, -0.0]
    assert _floats_text(np.array(values)) == T.canonical(values)
    assert _floats_text(np.array([])) == "[]"
    many = np.random.default_rng(0).choice([0.25, 1e-7, 3.0, -0.0, 0.0], 5000)
    assert _floats_text(many) == T.canonical(many.tolist())


def _per_channel_matmul():
    # the MatMul's result is also a graph output: it is lowered alone, per column
    return matmul_activation(K=16, N=12, per_channel=True, extra_user="output")


def _placed(result):
    steps = result.lowered.steps
    return [(type(s).__name__, getattr(s, "post", None)) for s in steps], steps


def test_a_per_channel_lowering_is_proven_as_one_family_with_the_same_program():
    before = prove.COUNTS["identities"]
    fam_run = compile_model(_per_channel_matmul())
    assert prove.COUNTS["identities"] - before == 12  # every column, none one by one
    one_by_one = compile_model(_per_channel_matmul(), solver="segments")
    assert prove.COUNTS["identities"] - before == 12  # a named procedure: no family
    a, steps = _placed(fam_run)
    b, _ = _placed(one_by_one)
    assert a == b and any(isinstance(s, NpuMatMul) for s in steps)
    assert not any(isinstance(s, HostKernel | HostOnnx) and "MatMul" in s.name for s in steps)


def test_a_fixed_point_target_decides_every_column_alone():
    fixed = load_target("npu_backend/targets/npu_fixed.toml")
    before = prove.COUNTS["identities"]
    compile_model(_per_channel_matmul(), target=fixed)
    assert prove.COUNTS["identities"] == before


def _families(root) -> list:
    import json
    from pathlib import Path

    recs = [json.loads(p.read_text()) for p in Path(root).rglob("*.json")]
    return [r for r in recs if r["obligation"].get("format") == "npu-family/1"]


def test_a_family_is_one_store_record_served_in_ro_mode(tmp_path):
    from compiler.cli.check_run import missing_proofs

    compile_model(_per_channel_matmul(), proofs_dir=tmp_path, proofs_mode="rw")
    fams = _families(tmp_path)
    assert len(fams) == 1 and fams[0]["verdict"]["solver"] == "identity"
    assert len(fams[0]["obligation"]["columns"]) == 12
    served = prove.COUNTS["served"]
    ro = compile_model(_per_channel_matmul(), proofs_dir=tmp_path, proofs_mode="ro")
    assert prove.COUNTS["served"] > served
    assert missing_proofs(ro, ro.context.config.check.store) == []
    a, _ = _placed(ro)
    assert any(name == "NpuMatMul" for name, _ in a)


def test_without_its_family_record_the_ro_gate_asks_for_each_columns_record(tmp_path):
    (tmp_path / "store").mkdir()
    before = prove.COUNTS["identities"]
    r = compile_model(_per_channel_matmul(), proofs_dir=tmp_path / "store", proofs_mode="ro")
    assert prove.COUNTS["identities"] == before  # nothing proven without a record
    assert any(d.code == "proof_missing" for d in r.diagnostics)
    _, steps = _placed(r)
    assert not any(isinstance(s, NpuMatMul) and s.post is not None for s in steps)


def test_a_tampered_family_record_is_refused(tmp_path):
    import json

    from prover.errors import StoreCorrupt

    compile_model(_per_channel_matmul(), proofs_dir=tmp_path, proofs_mode="rw")
    (p,) = [p for p in tmp_path.rglob("*.json") if "npu-family/1" in p.read_text()]
    rec = json.loads(p.read_text())
    rec["obligation"]["hi"][0] += 1
    p.write_text(json.dumps(rec))
    with pytest.raises(StoreCorrupt):
        compile_model(_per_channel_matmul(), proofs_dir=tmp_path, proofs_mode="ro")


def _group(cols, scale, post_scale=None, clip=None):
    from compiler.ir.column_group import ColumnGroup
    from npu_backend.postprocess import PostProcess, RequantParams

    before = _rq(scale) if clip is None else op("clip", _rq(scale), lo=clip[0], hi=clip[1])
    rq = RequantParams("float32", 0, "int8", scale=scale if post_scale is None else post_scale)
    return ColumnGroup(tuple(cols), before, PostProcess(rq))


def test_a_sites_family_takes_the_groups_that_are_identities_and_leaves_the_others():
    from types import SimpleNamespace

    from compiler.proving.families import site_family
    from prover.matmul import AccRange

    s32 = [float(np.float32(v)) for v in (0.01, 0.02, 0.03, 0.04)]
    groups = [
        _group([0, 2], s32[0]),  # an identity
        _group([1], s32[1], post_scale=s32[2]),  # the NPU rounds with another scale
        _group([3], s32[3], clip=(-5, 5)),  # the model clips, the NPU does not: another shape
        _group([4], s32[2]),  # an identity
    ]
    site = SimpleNamespace(id="site-7", post=groups)
    r = AccRange(lo=(-100,) * 5, hi=(100, 100, 100, 100, 2**40))
    found = site_family(site, r, Policy(0))
    assert found is not None
    fam, covered = found
    assert covered == {0} and fam.columns.tolist() == [0, 2]  # column 4 leaves int32
    assert fam.column(1).before == groups[0].before and fam.column(1).after == groups[0].after(ACC)
    assert fam.column(1).note == "site-7 columns 2..2"
    narrow = AccRange(lo=(-100,) * 5, hi=(100,) * 5)
    fam, covered = site_family(site, narrow, Policy(0))
    assert covered == {0, 3} and fam.columns.tolist() == [0, 2, 4]


def test_a_per_channel_site_proven_as_a_family_is_drawn_from_its_members(tmp_path):
    from compiler.cli.check_run import CheckOptions, run_pipeline
    from compiler.report.views import collect

    path = tmp_path / "pc.onnx"
    import onnx

    onnx.save(matmul_activation(K=16, N=8, per_channel=True), path)
    run = run_pipeline(str(path), CheckOptions(progress=False))
    (s,) = run.result.sites
    assert s.verdict == "proven" and s.solver == "identity" and len(s.obligations) == 1
    sv = collect(run).sites[s.id]
    assert sv.epilogues and all(ev.max_diff == 0 for ev in sv.epilogues)
    assert not any("could not be rebuilt" in n for n in sv.notes)


def test_a_per_channel_site_has_the_same_program_with_or_without_its_family():
    m = matmul_activation(K=16, N=24, per_channel=True)
    fam_run = compile_model(m)
    alone = compile_model(m, solver="segments")
    (a,), (b,) = fam_run.sites, alone.sites
    assert (a.verdict, a.max_diff, a.solver) == ("proven", 0, "identity")
    assert (b.verdict, b.max_diff, b.solver) == ("proven", 0, "segments")
    assert len(b.obligations) == 24 and len(a.obligations) == 1
    assert _placed(fam_run)[0] == _placed(alone)[0]


def test_a_per_tensor_lowering_and_site_are_families_too():
    """A per-tensor op is a family whose columns share one scale: its lowering and its
    site's epilogue are identities on npu_float (proven without a procedure), with the
    verdicts and program a named procedure gives; on npu_fixed nothing is."""
    for extra in ("output", None):  # lowered alone; fused into a site
        m = matmul_activation(K=16, N=12, per_channel=False, extra_user=extra)
        before = prove.COUNTS["identities"]
        fam_run = compile_model(m)
        assert prove.COUNTS["identities"] - before >= 12
        alone = compile_model(m, solver="segments")
        assert [(s.verdict, s.max_diff) for s in fam_run.sites] == [
            (s.verdict, s.max_diff) for s in alone.sites
        ]
        assert {s.solver for s in fam_run.sites if s.verdict == "proven"} <= {"identity"}
        assert {s.solver for s in alone.sites if s.verdict == "proven"} <= {"segments"}
        assert extra or [s.verdict for s in fam_run.sites] == ["proven"]
        assert _placed(fam_run)[0] == _placed(alone)[0]
    fixed = load_target("npu_backend/targets/npu_fixed.toml")
    before = prove.COUNTS["identities"]
    compile_model(matmul_activation(K=16, N=12, per_channel=False), target=fixed)
    assert prove.COUNTS["identities"] == before


def test_scale_in_reads_what_with_hole_would_without_rebuilding():
    from prover.family import hole_path, scale_in

    template, _ = with_hole(_lut(op("clip", _rq(0.01), lo=-100, hi=100)))
    path = hole_path(template)
    assert path == (0, 0)
    same_shape = [_lut(op("clip", _rq(s), lo=-100, hi=100)) for s in (0.01, 0.5, 3.0)]
    others = [
        _lut(op("clip", _rq(0.01), lo=-99, hi=100)),  # another parameter on the path
        _lut(op("clip", _rq(0.01, zp=3), lo=-100, hi=100)),  # another zero point
        _lut(op("clip", _rq(0.01, out="int16"), lo=-100, hi=100), in_type="int8"),
        _lut(_rq(0.01)),  # a shorter chain
        _lut(
            op("clip", op("requant_float", Var("x"), scale=0.01, zp=0, out="int8"), lo=-100, hi=100)
        ),
        op(
            "lut",
            op("clip", _rq(0.01), lo=-100, hi=100),
            table=TABLE[::-1],
            in_type="int8",
            index_order="offset",
        ),
    ]
    for t in same_shape + others:
        h = with_hole(t)
        want = h[1] if h is not None and h[0] == template else None
        assert scale_in(t, template, path) == want
    assert [scale_in(t, template, path) for t in same_shape] == [0.01, 0.5, 3.0]
    assert all(scale_in(t, template, path) is None for t in others)


def test_workers_are_not_started_early_for_columns_a_family_will_prove():
    import dataclasses

    from compiler.ir.context import CheckOptions, Context

    r = compile_model(matmul_activation(K=16, N=600, M=1, per_channel=True))
    g, ctx = r.graph, r.context
    named = Context(
        dataclasses.replace(ctx.config, check=CheckOptions(solver="segments")), ctx.state
    )
    assert prove.expected_obligations(r.context.state.original or g, None) >= 600
    assert prove.expected_obligations(r.context.state.original or g, named) >= 600
    assert prove.expected_obligations(r.context.state.original or g, ctx) < 10


def test_a_sites_family_reads_filled_groups_by_their_scale_and_builds_none_of_them():
    """A per-channel site's filled groups (`FilledGroup`) join its family by their scale,
    without their `before` term being built; the family is the one their built terms give
    (same hash), and a filled group of another template is read from its term."""
    from types import SimpleNamespace

    from compiler.ir.accumulator import acc_range
    from compiler.ir.column_group import ColumnGroup, FilledGroup
    from compiler.ir.epilogue import build_columns
    from compiler.proving.families import site_family

    t = load_target("npu_backend/targets/npu_float.toml")
    r = compile_model(matmul_activation(K=16, N=24, per_channel=True), "bitwise", t)
    (site,) = r.sites
    groups = build_columns(site, t)
    assert all(isinstance(g, FilledGroup) for g in groups[1:]) and len(groups) > 3
    for g in groups[1:]:
        g.__dict__.pop("before", None)  # none built yet
    rng = acc_range(site.compute)
    lazy = site_family(SimpleNamespace(id=site.id, post=groups), rng, Policy(0))
    built = [k for k, g in enumerate(groups) if "before" in g.__dict__]
    assert built == [0, len(groups) - 1]  # the first and last members are checked
    plain = [ColumnGroup(g.columns, g.before, g.post, g.acc_offset) for g in groups]
    whole = site_family(SimpleNamespace(id=site.id, post=plain), rng, Policy(0))
    assert lazy is not None and whole is not None
    assert lazy[1] == whole[1] == set(range(len(groups)))
    assert lazy[0].hash == whole[0].hash
    # a filled group whose template is not the first group's is read from its own term
    other = with_hole(op("clip", groups[1].before, lo=-5, hi=5))
    assert other is not None
    odd = FilledGroup(groups[1].columns, post=groups[1].post, template=other[0], scale=other[1])
    mixed = [groups[0], odd, *groups[2:]]
    fam, covered = site_family(SimpleNamespace(id=site.id, post=mixed), rng, Policy(0))
    assert 1 not in covered and covered == set(range(len(groups))) - {1}
    assert "before" in odd.__dict__


def test_a_run_of_filled_groups_is_read_at_once_where_it_stands_as_made(monkeypatch):
    """`build_columns` records the groups it filled from one template (`FilledRun`); the
    site's family reads such a run at once, and it is the family its groups give one by
    one (same hash and groups), columns sharing a scale included. A run whose groups no
    longer stand as made (one replaced), or whose first group is another object, is read
    group by group."""
    from types import SimpleNamespace

    import compiler.proving.families as fams
    from compiler.ir.accumulator import acc_range
    from compiler.ir.column_group import ColumnGroup
    from compiler.ir.epilogue import build_columns

    t = load_target("npu_backend/targets/npu_float.toml")
    r = compile_model(matmul_activation(K=16, N=24, per_channel=True), "bitwise", t)
    (site,) = r.sites
    rq = site.compute.attrs["requant"]
    rng = acc_range(site.compute)
    runs: list[int] = []
    real = fams._add_run

    def counted(run, at, *a):
        runs.append(at)
        return real(run, at, *a)

    monkeypatch.setattr(fams, "_add_run", counted)

    def both(groups):
        runs.clear()
        got = fams.site_family(SimpleNamespace(id=site.id, post=groups), rng, Policy(0))
        read = list(runs)
        plain = [ColumnGroup(g.columns, g.before, g.post, g.acc_offset) for g in groups]
        want = fams.site_family(SimpleNamespace(id=site.id, post=plain), rng, Policy(0))
        assert got is not None and want is not None
        assert got[0].hash == want[0].hash and got[1] == want[1]
        return read

    n = len(rq["scale"])
    for scales in (rq["scale"], tuple(rq["scale"][j % 5] for j in range(n))):
        site.compute.attrs["requant"] = {**rq, "scale": scales}
        groups = build_columns(site, t)
        assert both(groups) == [1]  # the run after the first group, at once
    site.compute.attrs["requant"] = rq
    groups = build_columns(site, t)
    replaced = [*groups[:3], dataclasses.replace(groups[3]), *groups[4:]]
    assert both(replaced) == []
    first = ColumnGroup(groups[0].columns, groups[0].before, groups[0].post.copy_with(), 0)
    assert both([first, *groups[1:]]) == []
