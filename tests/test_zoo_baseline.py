"""`--baseline`: a seeded verdict regression (an edited copy of a shipped target that breaks
one site) is caught by `prover zoo` and by `prover check`, exit 6, with the site named; an
unchanged run lists no change; every kind of change is classified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import EXAMPLES, assert_one_line_error, prover

from compiler.zoo import baseline as base
from compiler.zoo import report
from compiler.zoo.manifest import Defaults, load
from compiler.zoo.run import run_zoo
from compiler.zoo.task import RunSettings

TARGETS = Path(__file__).resolve().parent.parent / "npu_backend" / "targets"
ZOO = ("matmul_sigmoid", "multi_user", "matmul_clip_sigmoid")


def seeded_target(d: Path) -> Path:
    """npu_float with its LUT builder rounding toward zero: the Sigmoid tables of
    matmul_sigmoid and matmul_clip_sigmoid no longer match ONNX Runtime's."""
    text = (TARGETS / "npu_float.toml").read_text()
    assert 'rounding = "half_even"' in text
    p = d / "npu_float.toml"
    p.write_text(text.replace('rounding = "half_even"', 'rounding = "toward_zero"'))
    return p


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo_baseline")
    for n in ZOO:
        shutil.copy(EXAMPLES / f"{n}.onnx", d / f"{n}.onnx")
    seeded = seeded_target(d)
    (d / "seeded.toml").write_text(f"[[models]]\npath = '*.onnx'\ntargets = ['{seeded.name}']\n")
    before = run_zoo(load(str(d), Defaults()), RunSettings(), workers=2, processes=False)
    (d / "before.json").write_text(report.render_json(report.zoo_json(before)))
    return d


def test_seeded_regression_caught_by_the_zoo_with_the_site_named(zoo):
    after = run_zoo(
        load(str(zoo / "seeded.toml"), Defaults()), RunSettings(), workers=2, processes=False
    )
    new = {o.spec.key: base.TaskView(o.status, o.result.get("report")) for o in after.outcomes}
    changes = base.compare(base.load(str(zoo / "before.json")), new)
    bad = [c for c in changes if c.worse and c.kind == "verdict"]
    assert {c.where for c in bad} == {
        "matmul_clip_sigmoid.onnx [npu_float, bitwise, onnx] site-0 matmul+clip+sigmoid (mm,clip,sig)",
        "matmul_sigmoid.onnx [npu_float, bitwise, onnx] site-0 matmul+sigmoid (mm,sig)",
    }
    assert all(c.message == "proven -> refuted" for c in bad)
    # multi_user's site stays rejected, but its standalone Sigmoid table is no longer
    # provable either: the op moves to the host, a regression of its own
    mu = [c for c in changes if c.where.startswith("multi_user")]
    assert [(c.kind, c.worse, c.message) for c in mu] == [("host", True, "now on the host: sig")]
    data = report.zoo_json(after, changes, "before.json")
    jsonschema.validate(data, report.schema())
    assert data["summary"]["exit_code"] == 6
    rows = {t["model"]: t for t in data["tasks"]}
    assert rows["matmul_sigmoid.onnx"]["worse"] >= 1 and rows["multi_user.onnx"]["changes"] == 1
    page = report.render_html(data)  # the dashboard: self-contained, one row per task
    assert "<script" not in page and "http" not in page
    assert page.count("<tr") == 1 + len(ZOO) and page.count('<tr class="worse">') == 3
    assert "matmul_sigmoid.onnx [npu_float, bitwise, onnx] site-0 matmul+sigmoid (mm,sig)" in page
    md = report.render_markdown(data)
    assert "**worse** `verdict` matmul_sigmoid.onnx [npu_float, bitwise, onnx] site-0" in md


def test_cli_zoo_baseline_exit_6_names_the_site_and_unchanged_is_not_worse(zoo):
    r = prover(
        "zoo",
        zoo / "seeded.toml",
        "--no-processes",
        "--workers",
        "2",
        "--baseline",
        zoo / "before.json",
    )
    assert r.returncode == 6, r.stderr
    assert (
        "WORSE: matmul_sigmoid.onnx [npu_float, bitwise, onnx] site-0 matmul+sigmoid (mm,sig): proven -> refuted"
        in r.stderr
    )
    assert "against baseline" in r.stdout
    same = prover("zoo", zoo, "--no-processes", "--workers", "2", "--baseline", zoo / "before.json")
    assert same.returncode == 0, same.stderr
    assert "0 change(s)" in same.stdout


def test_cli_check_baseline_exit_6_names_the_site(tmp_path):
    model = EXAMPLES / "matmul_sigmoid.onnx"
    old = tmp_path / "old.json"
    r = prover("check", model, "--format", "json", "-o", old)
    assert r.returncode == 0, r.stderr
    seeded = seeded_target(tmp_path)
    out = tmp_path / "new.json"
    r = prover("check", model, "--target", seeded, "--baseline", old, "--format", "json", "-o", out)
    assert r.returncode == 6, r.stderr
    assert "WORSE: " in r.stderr and "site-0 matmul+sigmoid (mm,sig): proven -> refuted" in r.stderr
    data = json.loads(out.read_text())  # the schema hook validates it too
    kinds = {(c["kind"], c["worse"]) for c in data["baseline"]["changes"]}
    assert ("verdict", True) in kinds
    same = prover("check", model, "--baseline", old)
    assert same.returncode == 0 and "baseline" not in same.stderr


def test_bad_baseline_is_exit_2_before_checking(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text('{"not": "a report"}')
    r = prover("check", EXAMPLES / "matmul_sigmoid.onnx", "--baseline", bad)
    assert_one_line_error(r, "is not a check or zoo JSON report")
    r = prover("check", EXAMPLES / "matmul_sigmoid.onnx", "--baseline", tmp_path / "none.json")
    assert_one_line_error(r, "baseline not found")


def _report(sites, host=(), macs=None) -> dict:
    rep = {
        "model": "m.onnx",
        "policy": "bitwise",
        "target": "npu_float",
        "reference": {"name": "onnx"},
        "sites": [
            {
                "id": f"site-{i}",
                "pattern": "matmul+sigmoid",
                "nodes": list(n),
                "verdict": v,
                "time_ms": t,
            }
            for i, (n, v, t) in enumerate(sites)
        ],
        "host_ops": [
            {"code": "unsupported_op", "nodes": [h], "message": "", "action": ""} for h in host
        ],
    }
    if macs is not None:
        rep["macs"] = {"total": 100, "npu": macs}
    return rep


def _changes(old, new):
    return base.compare(base.tasks_of(old), base.tasks_of(new))


def test_every_kind_of_change_and_whether_it_is_worse():
    old = _report(
        [(("a", "s"), "proven", 5.0), (("b", "t"), "refuted", 5.0), (("c", "u"), "proven", 5.0)],
        macs=100,
    )
    new = _report(
        [
            (("a", "s"), "unknown", 5.0),
            (("b", "t"), "proven", 5.0),
            (("d", "v"), "rejected", 2000.0),
        ],
        host=("s",),
        macs=50,
    )
    got = {(c.kind, c.worse, c.message) for c in _changes(old, new)}
    assert got == {
        ("verdict", True, "proven -> unknown"),
        ("verdict", False, "refuted -> proven"),
        ("new_site", False, "new candidate, rejected"),
        ("removed_site", True, "no longer a candidate (was proven)"),
        ("host", True, "now on the host: s"),
        ("npu_share", True, "NPU share of MACs 100.0% -> 50.0%"),
        ("time", True, "check time 15 ms -> 2010 ms (more than doubled)"),
    }
    assert _changes(old, old) == []
    # a small check that got slower on a loaded machine is noise, not a regression
    fast = _report([(("a", "s"), "proven", 40.0)])
    assert _changes(_report([(("a", "s"), "proven", 10.0)]), fast) == []


def test_cli_check_against_a_zoo_baseline_compares_its_own_task_only(zoo):
    """`prover check MODEL --baseline ZOO.json`: the zoo task of that model file (matched by
    file name, target, policy, reference), none of the zoo's other tasks is `removed`."""
    model = zoo / "matmul_sigmoid.onnx"
    same = prover("check", model, "--baseline", zoo / "before.json")
    # the zoo decided the site's obligation once, on a warm worker (under a millisecond);
    # this check's first decision, in a fresh process, also pays the prover's imports: on a
    # loaded machine that can pass 1 s, a `time` change. Nothing else may differ.
    lines = [ln for ln in same.stderr.splitlines() if "baseline:" in ln]
    assert all("check time" in ln for ln in lines), same.stderr
    assert same.returncode == (6 if lines else 0), same.stderr
    seeded = prover(
        "check", model, "--target", zoo / "npu_float.toml", "--baseline", zoo / "before.json"
    )
    assert seeded.returncode == 6
    lines = [ln for ln in seeded.stderr.splitlines() if "baseline:" in ln]
    assert any("site-0 matmul+sigmoid (mm,sig): proven -> refuted" in ln for ln in lines)
    assert not any("multi_user" in ln or "removed_task" in ln for ln in lines)
