"""The HTML report at model scale (issue 26): a large model gets a summary table, sections
(with plots) only for its refuted and unknown sites and the first few proven ones, a
collapsed graph, ledger charts with one axis per unit, and a progress bar while drawn. The
256-site chain renders in under 10 s and under 3 MB (it took 6 min 53 s and 35 MB)."""

from __future__ import annotations

import re
import sys
import time

import onnx
import pytest
from cli_helpers import REPO

from compiler.report import graph_view, html
from compiler.report.model import Report, SiteReport
from compiler.report.views import GraphNode
from prover.verdict import ReasonCode, Status


def _chain_nodes(sites: int, verdict: str = "proven") -> tuple[list[GraphNode], list]:
    nodes, edges = [], []
    for i in range(sites):
        for op, name in (("QLinearMatMul", f"mm{i}"), ("QLinearSigmoid", f"act{i}")):
            nodes.append(GraphNode(name, op, [], [], f"site-{i}", verdict))
    names = [n.name for n in nodes]
    edges = list(zip(names, names[1:], strict=False))
    return nodes, edges


def test_a_long_chain_collapses_to_its_sections_and_one_run():
    nodes, edges = _chain_nodes(256)
    pat = {f"site-{i}": "matmul+sigmoid" for i in range(256)}
    got, e, note = graph_view.collapse(nodes, edges, pat, {"site-0", "site-1", "site-2"})
    assert [n.name for n in got] == ["site-0", "site-1", "site-2", "site-3 .. site-255"]
    assert got[-1].op_type == "253 x matmul+sigmoid" and got[-1].count == 253
    assert e == [("site-0", "site-1"), ("site-1", "site-2"), ("site-2", "site-3 .. site-255")]
    assert "512 ONNX nodes shown as 4 boxes" in note


def test_a_small_graph_is_drawn_whole():
    nodes, edges = _chain_nodes(4)
    assert graph_view.collapse(nodes, edges, {}, set()) == (nodes, edges, "")


def test_runs_break_at_branches_and_at_a_different_verdict():
    nodes, edges = _chain_nodes(30)
    nodes[20].verdict = nodes[21].verdict = "refuted"  # site-10
    # a side branch: an unfused node reading mm5's output, feeding act7
    nodes.append(GraphNode("side", "Relu", [], [], None, None, host=True))
    edges += [("mm5", "side"), ("side", "act7")]
    got, e, _ = graph_view.collapse(nodes, edges, {}, set())
    names = [n.name for n in got]
    assert "site-10" in names  # the refuted site is not merged with its proven neighbours
    assert "side" in names
    assert ("site-10", "site-11 .. site-29") in e
    # every kept edge joins two drawn boxes, and the chain is still connected
    assert all(u in names and v in names for u, v in e)
    assert sum(n.count for n in got if n.site) == 30


def test_constant_nodes_are_left_out_of_a_collapsed_graph():
    nodes, edges = _chain_nodes(30)
    consts = [GraphNode(f"c{i}", "Constant", [], [f"c{i}_out"]) for i in range(40)]
    edges += [(f"c{i}", f"mm{i % 30}") for i in range(40)]
    got, e, note = graph_view.collapse(consts + nodes, edges, {}, set())
    assert [n.name for n in got] == ["site-0 .. site-29"] and e == []
    assert "parameter nodes (Constant, weight Dequantize) left out" in note


def test_a_graph_too_big_to_draw_is_cut_and_says_so():
    nodes, edges = _chain_nodes(100)
    for i, n in enumerate(nodes):  # alternate verdicts per site: nothing merges
        n.verdict = "proven" if (i // 2) % 2 else "unknown"
    got, e, note = graph_view.collapse(nodes, edges, {}, set())
    assert len(got) == graph_view.MAX_DRAWN
    assert f"the first {graph_view.MAX_DRAWN} of 100 boxes are drawn" in note
    kept = {n.name for n in got}
    assert all(u in kept and v in kept for u, v in e)


def _report(verdicts: list[Status]) -> Report:
    sites = []
    for i, v in enumerate(verdicts):
        reason = None
        if v is Status.REJECTED:
            from compiler.ir.reasons import Reason

            reason = Reason(ReasonCode.MULTIPLE_USERS, "x")
        sites.append(SiteReport(f"site-{i}", "matmul+sigmoid", (f"mm{i}",), v, reason))
    return Report("m.onnx", "bitwise", "npu_float", sites)


def test_plan_small_model_shows_every_site():
    r = _report([Status.PROVEN, Status.REFUTED, Status.REJECTED])
    shown, plotted = html.plan(r)
    assert [s.id for s in shown] == ["site-0", "site-1", "site-2"] and len(plotted) == 3


def test_plan_large_model_shows_refuted_unknown_and_the_first_proven():
    v = [Status.PROVEN] * 40 + [Status.UNKNOWN, Status.REFUTED, Status.REJECTED] * 2
    shown, plotted = html.plan(_report(v))
    ids = [s.id for s in shown]
    assert ids == ["site-41", "site-44", "site-40", "site-43", "site-0", "site-1", "site-2"]
    assert plotted == set(ids)
    many = html.plan(_report([Status.REFUTED] * 100))
    assert len(many[0]) == html.MAX_SECTIONS and len(many[1]) == html.MAX_PLOTTED


def test_ledger_chart_has_one_axis_per_unit():
    pytest.importorskip("matplotlib")
    from compiler.report import plots

    entry = {
        "bytes_not_written": 4_000_000, "bytes_not_read": 3_000_000,
        "instructions_before": 12, "instructions_after": 9,
        "cycles_before": 700, "cycles_after": 500,
    }  # fmt: skip
    svg = plots.ledger_svg(entry, "t")
    assert len(re.findall(r'<g id="axes_\d+"', svg)) == 3  # bytes, instructions, cycles
    assert "4,000,000" in svg and "700" in svg


def _chain_model(sites: int) -> onnx.ModelProto:
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from check_bench import chain_model
    finally:
        sys.path.remove(str(REPO / "bench"))
    return chain_model(sites)


@pytest.mark.slow  # about 2 s of CPU (the tools imported); 12 s wall from a cold start at load 23
def test_256_site_chain_renders_in_seconds_and_megabytes(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from compiler.cli import prover

    model = tmp_path / "chain256.onnx"
    onnx.save(_chain_model(256), model)
    out = tmp_path / "r.html"
    t0 = time.process_time()  # CPU of this process: wall time on a shared machine says little
    args = ["check", str(model), "--no-progress", "--proofs-mode", "off", "-o", str(out)]
    assert prover.main(args) == 0  # the format is the extension's
    cpu = time.process_time() - t0
    err = capsys.readouterr().err
    assert f"prover: wrote {out} (html report, " in err
    size = out.stat().st_size
    assert cpu < 10 and size < 3_000_000, (cpu, size)
    h = out.read_text(encoding="utf-8")
    assert h.count("<svg") == 9  # graph, headline, 3 sites x (epilogue + table), total ledger
    assert len(re.findall(r'<tr id="row-site-\d+"', h)) == 256  # every site in the table
    assert len(re.findall(r'<section id="site-\d+"', h)) == html.PROVEN_SHOWN
    assert "253 x matmul+sigmoid" in h  # the collapsed graph


@pytest.mark.slow
def test_render_reports_progress(tmp_path):
    pytest.importorskip("matplotlib")
    from compiler.cli.check_run import CheckOptions, run_pipeline

    model = tmp_path / "chain12.onnx"
    onnx.save(_chain_model(12), model)
    run = run_pipeline(str(model), CheckOptions(progress=False))
    seen: list[tuple[int, int]] = []
    html.render(run, lambda d, t: seen.append((d, t)))
    total = html.PROVEN_SHOWN + 3
    assert seen == [(i, total) for i in range(1, total + 1)]
