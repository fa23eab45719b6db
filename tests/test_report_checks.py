"""A site's `checks` in the human-readable reports: text and Markdown (and HTML) show per
check one summary line (kind, status, counts) and a bounded listing of the impossible or
refuted column groups; a refuted site's reason shows when it says more than the
counterexample. The counts are the JSON's."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from models import matmul_activation
from report_fixtures import sample_report

from compiler.api import compile_model
from compiler.cli.check_run import CheckOptions, run_pipeline
from compiler.report import json_form, markdown, text
from compiler.report.checks import LISTED, of_site, refuted_reason
from compiler.report.model import Reason, Report, SiteReport
from npu_backend.target import load_target

DIGITS = Path(__file__).resolve().parent.parent / "examples/digits"
PC = str(DIGITS / "digits_matmul_qop_s8s8_pc.onnx")
FLOAT = load_target()


@pytest.fixture(scope="module")
def pc_run():
    """The per-channel digits model on npu_fixed: both sites refuted, with a
    `requant_synthesis` check each (synthesised and impossible column groups)."""
    run = run_pipeline(PC, CheckOptions(target="npu_fixed", progress=False))
    assert [s.verdict.value for s in run.report.sites] == ["refuted", "refuted"]
    return run


@pytest.fixture(scope="module")
def pc(pc_run):
    return pc_run.report


def _site_block(out: str, site: SiteReport) -> list[str]:
    """The site's line and the indented lines under it."""
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if f"({','.join(site.nodes)})" in ln)
    j = i + 1
    while j < len(lines) and lines[j].startswith(" "):
        j += 1
    return lines[i:j]


def _synthesis(site_json: dict) -> dict:
    (c,) = [c for c in site_json["checks"] if c["check"] == "requant_synthesis"]
    return c


def _expected_counts(check: dict) -> str:
    n = Counter(g["kind"] for g in check["groups"])
    parts = [f"{n[k]} {k}" for k in ("rounded", "synthesised", "impossible", "refuted") if n[k]]
    return f"{len(check['groups'])} column groups: " + ", ".join(parts)


def test_text_shows_the_json_counts_and_a_bounded_listing(pc):
    out = text.render(pc, verbose=True)
    sites = json.loads(json_form.render(pc))["sites"]
    for site, sj in zip(pc.sites, sites, strict=True):
        block = _site_block(out, site)
        c = _synthesis(sj)
        # the site's own line keeps its shape
        assert block[0].startswith("REFUTED  ") and block[0].endswith(" ms")
        assert "counterexample at acc=" in block[0]
        head = f"synthesis {c['status']}: {_expected_counts(c)}"
        assert [ln.strip() for ln in block if ln.strip().startswith("synthesis ")] == [head]
        bad = [g for g in c["groups"] if g["kind"] in ("impossible", "refuted")]
        assert len(bad) > LISTED  # the listing is cut on both sites of this model
        listed = [ln.strip() for ln in block if ln.strip().startswith("column ")]
        assert listed == [
            f"column {g['columns'][0]} {g['kind']}: {g['message']}" for g in bad[:LISTED]
        ]
        more = f"... {len(bad) - LISTED} more impossible (see --format json)"
        assert block[-1].strip() == more
        # no synthesised group is listed (only counted)
        assert not any("synthesised multiplier=" in ln for ln in block)


def test_site0_counts(pc):
    """The README's example: 64 column groups, 41 synthesised and 23 impossible."""
    line = next(ln for ln in _site_block(text.render(pc), pc.sites[0]) if "synthesis" in ln)
    assert line.strip() == "synthesis violated: 64 column groups: 41 synthesised, 23 impossible"


def test_a_refuted_site_shows_why_no_parameters_exist(pc):
    out = text.render(pc, verbose=True)
    for site in pc.sites:
        block = _site_block(out, site)
        assert "no multiplier/shift/zero_point/table on this target works" in site.reason.message
        assert block[1].strip() == f"reason: {site.reason.message}"
        assert "no multiplier" not in block[0]  # the site line itself is unchanged


def test_markdown_shows_the_same_counts_and_listing(pc):
    md = markdown.render(pc)
    section = md[md.index("### Checks") :]
    sites = json.loads(json_form.render(pc))["sites"]
    for sj in sites:
        c = _synthesis(sj)
        assert f"- ❌ `synthesis` violated: {_expected_counts(c)}" in section
        bad = [g for g in c["groups"] if g["kind"] in ("impossible", "refuted")]
        first = bad[0]
        assert f"  - column {first['columns'][0]} impossible: {first['message']}" in section
        assert bad[LISTED]["message"] not in section.split(f"**{sj['id']}**")[1].split("**")[0]
        assert (
            f"  - ... {len(bad) - LISTED} more impossible (full list in the JSON report)" in section
        )


def _html_checks(page: str, c: dict) -> None:
    assert "<h3>Checks</h3>" in page
    assert f'<span class="diff">violated</span>: {_expected_counts(c)}' in page
    bad = [g for g in c["groups"] if g["kind"] == "impossible"]
    assert f"<li>column {bad[0]['columns'][0]} impossible: " in page
    assert f"... {len(bad) - LISTED} more impossible (full list in the JSON report)" in page


def test_html_site_section_shows_the_checks(pc):
    from compiler.report import html as report_html

    c = _synthesis(json.loads(json_form.render(pc))["sites"][0])
    _html_checks(report_html._checks(pc.sites[0]), c)


@pytest.mark.slow
def test_html_page_shows_the_checks(pc_run, pc):
    """The whole page (9 s: it draws the epilogues of the per-channel sites)."""
    pytest.importorskip("matplotlib")
    from compiler.report import html as report_html

    page = report_html.render(pc_run)
    _html_checks(page, _synthesis(json.loads(json_form.render(pc))["sites"][0]))


def test_a_proven_site_without_checks_prints_no_check_lines():
    r = compile_model(matmul_activation(per_channel=True), "bitwise", FLOAT)
    (site,) = r.sites
    s = SiteReport.of(site)
    assert s.verdict.value == "proven" and s.checks == ()
    rep = Report("m.onnx", "bitwise", "npu_float", [s])
    lines = text.render(rep).splitlines()
    assert len(lines) == 3 and lines[1].startswith("PROVEN   ")
    assert not any(ln.startswith(" ") for ln in lines)
    assert "### Checks" not in markdown.render(rep)


def test_a_held_tile_check_is_one_line():
    """A grouped fused step: its `tile_columns` check holds over one tile of 12 columns."""
    r = compile_model(
        matmul_activation(N=12, per_channel=True), "bitwise", FLOAT, schedule={"mm": "grouped"}
    )
    (site,) = r.sites
    s = SiteReport.of(site)
    lines = text.render(Report("m.onnx", "bitwise", "npu_float", [s])).splitlines()
    assert lines[1].startswith("PROVEN   ")
    assert lines[2] == " " * 9 + "tile_columns held: 1 column tile over columns 0..11 (grouped)"
    assert lines[3].startswith("1 candidate:")
    md = markdown.render(Report("m.onnx", "bitwise", "npu_float", [s]))
    assert "- ✅ `tile_columns` held: 1 column tile over columns 0..11 (grouped)" in md


def _groups(kinds: list[str]) -> dict:
    return {
        "check": "requant_synthesis",
        "status": "violated",
        "message": "requantization of ...",
        "groups": [
            {"columns": [j, j], "kind": k, "message": f"group {j} {k}"} for j, k in enumerate(kinds)
        ],
    }


def test_a_2048_column_site_prints_a_bounded_listing():
    kinds = ["synthesised", "impossible", "refuted", "rounded"] * 512
    s = SiteReport("s", "p", ("mm",), "proven", checks=(_groups(kinds),))
    block = text.site_details(s)
    assert len(block) == 1 + LISTED + 1
    assert block[0].strip() == (
        "synthesis violated: 2048 column groups: 512 rounded, 512 synthesised, "
        "512 impossible, 512 refuted; requantization of ..."
    )
    assert [ln.strip() for ln in block[1:-1]] == [
        "column 1 impossible: group 1 impossible",
        "column 2 refuted: group 2 refuted",
        "column 5 impossible: group 5 impossible",
        "column 6 refuted: group 6 refuted",
        "column 9 impossible: group 9 impossible",
    ]
    assert block[-1].strip() == "... 1019 more: 509 impossible, 510 refuted (see --format json)"
    md = markdown.render(Report("m.onnx", "bitwise", "t", [s]))
    assert md.count("\n  - ") == LISTED + 1


def test_a_check_without_notable_groups_lists_none():
    s = SiteReport("s", "p", ("mm",), "proven", checks=(_groups(["synthesised"] * 3),))
    (c,) = of_site(s)
    assert c.listed == () and c.more == {}
    assert text.site_details(s) == [
        " " * 9 + "synthesis violated: 3 column groups: 3 synthesised; requantization of ..."
    ]


def test_an_unknown_check_kind_shows_name_status_and_message():
    s = SiteReport("s", "p", ("mm",), "proven", checks=({"check": "x", "status": "held"},))
    assert [ln.strip() for ln in text.site_details(s)] == ["x held"]
    s.checks = ({"check": "x", "status": "violated", "message": "why"},)
    assert [ln.strip() for ln in text.site_details(s)] == ["x violated; why"]


def test_a_reason_restating_the_counterexample_is_not_repeated():
    r = sample_report()
    refuted = r.sites[1]  # "table entry -20 differs: ONNX Runtime 39, target 40", cex 39 vs 40
    assert refuted_reason(refuted) == "" and text.site_details(refuted) == []
    refuted.reason = Reason("refuted", f"{refuted.reason.message}; the table was rounded")
    assert refuted_reason(refuted) == refuted.reason.message
    refuted.reason = Reason("refuted", "element correspondence fails at 2")  # names neither
    assert text.site_details(refuted) == [" " * 9 + "reason: element correspondence fails at 2"]
    # other verdicts never get a reason line (their site line already carries the reason)
    assert all(text.site_details(x) == [] for x in r.sites if x is not refuted)


@pytest.mark.slow
def test_a_proven_site_whose_groups_share_no_table_says_so():
    """Per-tensor digits MatMul on npu_fixed: every group synthesised and proven, but no
    table serves them all (the site stays on the host): the check's note says why."""
    model = str(DIGITS / "digits_matmul_qop_s8s8_pt.onnx")
    rep = run_pipeline(model, CheckOptions(target="npu_fixed", progress=False)).report
    out = text.render(rep)
    for site, sj in zip(rep.sites, json.loads(json_form.render(rep))["sites"], strict=True):
        c = _synthesis(sj)
        block = _site_block(out, site)
        assert block[0].startswith("PROVEN   ")
        assert len(block) == 2  # no group is impossible or refuted: nothing listed
        assert block[1].strip().startswith(f"synthesis violated: {_expected_counts(c)}; ")
        assert "no table is shared by the groups of columns" in block[1]
