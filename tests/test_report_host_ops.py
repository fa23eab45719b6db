"""Ops kept on the host (the frontend's `unsupported_op` placements and the lowering's
fallbacks) reach every report format with their code, nodes, message and action."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from compiler.cli.check_run import CheckOptions, run_pipeline
from compiler.report import html as report_html
from compiler.report import json_form, junit, markdown, sarif, text
from compiler.report.model import Report, SiteReport
from prover.verdict import ReasonCode

MODEL = str(Path(__file__).resolve().parent.parent / "examples/digits/digits_gemm_qop_u8s8_pt.onnx")


@pytest.fixture(scope="module")
def run():
    """npu_fixed: ArgMax & co. stay on the host (unsupported_op) and the standalone
    requantization of the unfused last Gemm is refuted there (a lowering fallback).
    Per-tensor: the per-channel model's group synthesis costs 6 s and changes nothing here."""
    return run_pipeline(MODEL, CheckOptions(target="npu_fixed", progress=False))


@pytest.fixture(scope="module")
def host(run):
    ops = run.report.host_ops
    codes = {h.code for h in ops}
    assert ReasonCode.UNSUPPORTED_OP in codes and ReasonCode.REFUTED in codes, codes
    assert all(h.action and h.nodes and h.message for h in ops)
    return ops


def test_host_ops_are_not_site_diagnostics(run, host):
    site_nodes = {n for s in run.report.sites for n in s.nodes}
    assert any("ArgMax" in h.nodes for h in host)
    assert not any(set(h.nodes) <= site_nodes and h.code is ReasonCode.UNSUPPORTED_OP for h in host)


def test_text(run, host):
    lines = [x for x in text.render(run.report, verbose=True).splitlines() if x.startswith("HOST")]
    assert len(lines) == len(host)
    for line, h in zip(lines, host, strict=True):
        assert h.message.split(" stays on the host: ")[-1] in line and f"action: {h.action}" in line
        if h.code is ReasonCode.REFUTED:  # a lowering verdict in words: it is no refuted site
            assert "[refuted]" not in line and "its NPU form was refuted" in line
        else:
            assert f"[{h.code}]" in line
    short = [x for x in text.render(run.report).splitlines() if x.startswith("HOST")]
    assert all(len(x) <= 160 and "action:" not in x for x in short)
    assert any("ArgMax" in x for x in short)


def test_json_validates_and_keeps_the_fields(run, host):
    j = json.loads(json_form.render(run.report))
    jsonschema.Draft202012Validator(json_form.schema()).validate(j)
    assert j["host_ops"] == [
        {"code": h.code.value, "nodes": h.nodes, "message": h.message, "action": h.action}
        for h in host
    ]


def test_sarif(run, host):
    log = sarif.sarif_log(run.report)
    res = [r for r in log["runs"][0]["results"] if "hostOp/v1" in r["partialFingerprints"]]
    assert [r["ruleId"] for r in res] == [h.code.value for h in host]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    for r, h in zip(res, host, strict=True):
        assert r["level"] == "note" and r["properties"]["action"] == h.action
        assert rules[r["ruleIndex"]]["id"] == h.code.value
        assert [loc["name"] for loc in r["locations"][0]["logicalLocations"]] == h.nodes


def test_junit(run, host):
    root = ET.fromstring(junit.render(run.report))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    for i, h in enumerate(host):
        v = props[f"host_op.{i}"]
        assert v.startswith(f"[{h.code}] {h.message}") and h.action in v


def test_markdown(run, host):
    md = markdown.render(run.report)
    assert "### Kept on the host" in md
    section = md.split("### Kept on the host", 1)[1]
    for h in host:
        row = next(x for x in section.splitlines() if f"`{h.code}`" in x and h.nodes[0] in x)
        assert h.action in row


def test_html(run, host):
    page = report_html.render(run)
    assert 'id="host-ops"' in page
    section = page.split('id="host-ops"', 1)[1].split("</table>", 1)[0]
    for h in host:
        assert html.escape(h.message, quote=True) in section
        assert html.escape(h.action, quote=True) in section


def test_no_host_section_without_host_ops():
    r = Report("m.onnx", "bitwise", "t", [SiteReport("s0", "p", ("a",), "proven")])
    assert "Kept on the host" not in markdown.render(r)
    assert "HOST" not in text.render(r)
    assert "host_ops" not in json_form.report_json(r)
