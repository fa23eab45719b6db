"""`--format markdown`: one table of sites, verdicts and reasons, then the refuted sites'
counterexamples (for pull-request comments)."""

from __future__ import annotations

from cli_helpers import EXAMPLES
from report_fixtures import sample_report

from compiler.cli import prover as cli_prover
from compiler.report import markdown as report_markdown
from compiler.report.model import Reason, Report, SiteReport


def _table(md: str) -> list[list[str]]:
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows]


def test_one_row_per_site_with_verdict_and_reason():
    md = report_markdown.render(sample_report())
    rows = _table(md)
    header = rows[0]
    assert header == ["site", "pattern", "nodes", "verdict", "reason", "ms"]
    sites = [r for r in rows if r[0] in ("s0", "s1", "s2", "s3")]
    assert [r[0] for r in sites] == ["s0", "s1", "s2", "s3"]
    assert [r[3].split()[-1] for r in sites] == ["proven", "refuted", "unknown", "rejected"]
    assert sites[3][4].startswith("`multiple_users`")
    assert "4 candidates: **1 proven**, **1 refuted**, 1 unknown, 1 rejected" in md


def test_refuted_sites_get_their_counterexample():
    md = report_markdown.render(sample_report())
    cex = md[md.index("### Counterexamples") :]
    assert "#### s1 (mm_lut, sig_lut)" in cex
    assert "At `acc=-4321`: original **39**, fused **40**." in cex
    assert "X: 1x16 int8: [[-8, -7, -6" in cex
    assert "| Y | [0, 0] | 39 | 40 |" in cex
    assert "s2" not in cex and "s0" not in cex  # only refuted sites


def test_no_counterexample_section_without_refutations():
    r = sample_report()
    r.sites = [s for s in r.sites if s.verdict.value != "refuted"]
    assert "Counterexamples" not in report_markdown.render(r)


def test_cells_cannot_break_the_table():
    s = SiteReport("s|x", "a|b", ("n|1",), "rejected", Reason("layout_mismatch", "a | b\nc"))
    md = report_markdown.render(Report("m.onnx", "bitwise", "npu_float", [s]))
    row = [ln for ln in md.splitlines() if ln.startswith("| s\\|x")][0]
    assert row.count(" | ") == 5 and "\\|" in row and "\n" not in row


def test_cli_markdown_on_the_showcase(tmp_path):
    out = tmp_path / "r.md"
    args = ["check", str(EXAMPLES / "showcase.onnx"), "--no-progress", "--format", "markdown"]
    assert cli_prover.main([*args, "-o", str(out)]) == 1
    md = out.read_text()
    assert len([r for r in _table(md) if r[0].startswith("site-")]) == 4
    assert "At `acc=-6634`: original **39**, fused **40**." in md
    assert "| Y_lut | [0, 3] | 39 | 40 |" in md
    assert "reference `onnx`" in md
