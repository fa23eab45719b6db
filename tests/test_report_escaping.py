"""Names from the model (node names, input names) are shown by every report format
without acting on what reads it: JUnit stays well-formed XML, Markdown gets no tag, link
or table cell from a name, text and SARIF messages carry no raw control character, the
HTML page and its graph plot render (a `$` is no formula), and a CLI error line is inert."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler.cli import prover as cli_prover
from compiler.report import junit, markdown, sarif, text
from compiler.report.inert import visible
from compiler.report.model import (
    Diagnostic,
    Reason,
    Report,
    SiteReport,
    Status,
    WholeModelCounterexample,
)
from prover.verdict import Counterexample
from tests.cli_helpers import prover
from tests.models import matmul_activation

IMG = "<img src=x onerror=alert(1)>"
ESC = "mm\x1b[31mred\x07\x00"
MARKS = "act*b*_u_|p|`t`[l](http://x)~s~\u202e"
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e]")


def hostile_report() -> Report:
    """One refuted site (with a counterexample), one rejected site and a host op, every
    name and message carrying markup and control characters."""
    cex = WholeModelCounterexample(
        local=Counterexample({"acc": -3}, 39, 40, 1),
        inputs={f"X{ESC}```": np.arange(4, dtype=np.int8).reshape(1, 4)},
        expected={f"Y{IMG}": np.array([[39]], dtype=np.int8)},
        actual={f"Y{IMG}": np.array([[40]], dtype=np.int8)},
    )
    sites = [
        SiteReport(
            "s0", "MatMul->Sigmoid", (ESC, IMG), Status.REFUTED,
            Reason("refuted", f"entry of {ESC} differs\nsecond line {IMG}"),
            counterexample=cex,
        ),
        SiteReport(
            "s1", "MatMul->Sigmoid", (MARKS,), Status.REJECTED,
            Reason("multiple_users", f"{MARKS} output also feeds {IMG}"),
        ),
    ]  # fmt: skip
    host = [Diagnostic("unsupported_op", [IMG, ESC], f"node '{ESC}' {IMG} runs on the host")]
    findings = [{"code": "reference_divergence", "message": f"{IMG} {ESC}"}]
    return Report("m\x1b[1m.onnx", "bitwise", "npu_float", sites, host_ops=host, findings=findings)


def test_visible_escapes_controls_only():
    assert visible("a\x1b[0m\tb\n\u202ec\x85") == "a\\x1b[0m\\x09b\\x0a\\u202ec\\x85"
    assert visible("naïve_名前 <b>") == "naïve_名前 <b>"
    assert visible(visible("\x1b")) == "\\x1b"


def test_junit_is_well_formed_and_shows_the_escapes():
    root = ET.fromstring(junit.render(hostile_report()))  # raised ParseError before
    cases = root.findall("testsuite/testcase")
    assert cases[0].get("name") == f"s0 ({visible(ESC)},{IMG})"
    assert "\\x1b" in cases[0].find("failure").get("message")
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["model"] == "m\\x1b[1m.onnx"


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, split at pipes not escaped by a backslash."""
    return re.split(r"(?<!\\)\|", row.strip().strip("|"))


def test_markdown_has_no_tag_link_or_extra_cell():
    md = markdown.render(hostile_report())
    assert "<img" not in md and "<" not in md.replace("&lt;", "")
    assert CONTROL.search(md) is None
    assert "](http" not in md.replace("\\](http", "")  # no link
    rows = [x for x in md.splitlines() if x.startswith(("| s0 ", "| s1 "))]
    assert [len(_cells(r)) for r in rows] == [6, 6]  # a pipe in a name makes no cell
    assert "act\\*b\\*\\_u\\_\\|p\\|\\`t\\`\\[l\\](http://x)\\~s\\~\\\\u202e" in rows[1]
    fence = md.split("```", 2)[1]  # the whole-model input block
    assert "X" in fence and "'''" in fence  # the backticks of the name cannot close it
    host = md.split("### Kept on the host", 1)[1]
    assert len(_cells(next(x for x in host.splitlines() if "unsupported_op" in x))) == 4


def test_text_has_no_raw_control_character():
    t = text.render(hostile_report())
    assert CONTROL.search(t) is None
    assert "mm\\x1b[31mred\\x07\\x00" in t
    # header, refuted site and its reason (its newline shown), rejected site, finding,
    # host op, the -v hint, summary
    assert len(t.splitlines()) == 8 and "differs\\x0asecond line" in t


def test_sarif_messages_are_inert_and_locations_exact():
    log = json.loads(sarif.render(hostile_report()))
    results = log["runs"][0]["results"]
    for r in results:
        assert CONTROL.search(r["message"]["text"]) is None
    names = [loc["name"] for loc in results[0]["locations"][0]["logicalLocations"]]
    assert names == [ESC, IMG]  # machine data keeps the exact names


def _hostile_model(path: Path, names: list[str]) -> Path:
    m = matmul_activation()
    for node, name in zip(m.graph.node, names, strict=True):
        node.name = name
    onnx.save(m, path)
    return path


def test_cli_text_report_of_a_hostile_model(tmp_path: Path):
    path = _hostile_model(tmp_path / "h.onnx", [ESC, MARKS])
    r = prover("check", path, "--proofs-mode", "off")
    assert r.returncode == 0, r.stderr
    assert CONTROL.search(r.stdout) is None and "mm\\x1b[31mred" in r.stdout


def test_cli_error_line_is_inert(tmp_path: Path):
    path = _hostile_model(tmp_path / "d.onnx", [ESC, ESC])  # refused: duplicate names
    r = prover("check", path, "--proofs-mode", "off")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert CONTROL.search(r.stderr) is None and "mm\\x1b[31mred" in r.stderr


def test_html_graph_plot_takes_any_name():
    """A `$...$` name was parsed as a matplotlib formula (exit 4); controls reached the SVG."""
    pytest.importorskip("matplotlib")
    from compiler.report import plots
    from compiler.report.views import GraphNode

    nodes = [GraphNode("$\\foo{$", "MatMul", ["x"], ["h"]), GraphNode(ESC, "Sigmoid", ["h"], ["y"])]
    svg = plots.graph_svg(nodes, [("$\\foo{$", ESC)])  # raised ValueError before
    assert CONTROL.search(svg) is None


@pytest.mark.slow  # ~3 s: a whole check and page; the plot test above covers the crash
def test_html_page_shows_names_inert(tmp_path: Path):
    """The HTML page's own text (beside the plot) escapes markup and control characters."""
    pytest.importorskip("matplotlib")
    path = _hostile_model(tmp_path / "h.onnx", [IMG, ESC])
    out = tmp_path / "h.html"
    args = ["check", str(path), "--no-progress", "--proofs-mode", "off", "--format", "html"]
    assert cli_prover.main([*args, "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert CONTROL.search(page) is None and "<img" not in page
    assert "mm\\x1b[31mred" in page
