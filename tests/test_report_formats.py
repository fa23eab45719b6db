"""Report writers: text, JSON, JUnit and the exit-code rule, from a hand-made report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from report_fixtures import sample_report

from compiler.report import json_form as report_json
from compiler.report import junit as report_junit
from compiler.report import text as report_text
from compiler.report.model import ExitCode, Reason, Report, SiteReport, Status


def test_summary_counts_every_verdict():
    s = sample_report().summary
    assert (s.candidates, s.proven, s.refuted, s.unknown, s.rejected) == (4, 1, 1, 1, 1)


@pytest.mark.parametrize(
    ("verdicts", "code"),
    [
        ([], ExitCode.OK),
        (["proven", "rejected"], ExitCode.OK),
        (["proven", "unknown"], ExitCode.UNKNOWN),
        (["unknown", "refuted"], ExitCode.REFUTED),
        (["refuted"], ExitCode.REFUTED),
    ],
)
def test_exit_code_rule(verdicts, code):
    why = Reason("multiple_users", "kept")
    sites = [
        SiteReport(f"s{i}", "p", ("a",), v, why if v == "rejected" else None)
        for i, v in enumerate(verdicts)
    ]
    assert Report("m.onnx", "bitwise", "t", sites).exit_code() == code


def test_unproven_site_always_has_a_reason():
    s = SiteReport("s", "p", ("a",), "unknown")
    assert s.reason is not None and s.reason.code == "unknown"
    assert SiteReport("s", "p", ("a",), "proven").reason is None
    with pytest.raises(ValueError):
        SiteReport("s", "p", ("a",), "maybe")
    with pytest.raises(ValueError, match="needs its reason code"):
        SiteReport("s", "p", ("a",), "rejected")
    with pytest.raises(ValueError):
        Reason("not_a_code", "reason codes are DESIGN.md's, checked")


def test_json_has_design_fields():
    j = json.loads(report_json.render(sample_report()))
    assert {"model", "policy", "target", "summary", "sites"} <= set(j)
    assert j["summary"] == {"candidates": 4, "proven": 1, "refuted": 1, "unknown": 1, "rejected": 1}
    by_id = {s["id"]: s for s in j["sites"]}
    for s in j["sites"]:
        assert {"id", "pattern", "nodes", "verdict", "time_ms"} <= set(s)
    assert "reason" not in by_id["s0"]
    assert by_id["s3"]["reason"]["code"] == "multiple_users"
    cex = by_id["s1"]["counterexample"]
    x = report_json.array_from_json(cex["inputs"]["X"])
    assert x.dtype == np.int8 and x.shape == (1, 16) and x[0, 0] == -8
    assert cex["expected"]["Y"]["data"] == [[39, 12]]
    assert cex["actual"]["Y"]["data"] == [[40, 12]]
    assert cex["local"] == {"acc": -4321}


def test_text_one_line_per_site_and_summary():
    out = report_text.render(sample_report(), verbose=True)
    lines = out.splitlines()
    assert len(lines) == 1 + 4 + 1
    assert lines[1].startswith("PROVEN") and "mm_ok,sig_ok" in lines[1]
    assert "Y[0,0] expected 39 got 40" in lines[2] and "acc=-4321" in lines[2]
    assert "[unknown]" in lines[3] and "[multiple_users]" in lines[4]
    assert lines[-1] == "4 candidates: 1 proven, 1 refuted, 1 unknown, 1 rejected"


def test_counterexample_differing_elements():
    r = sample_report()
    assert r.sites[1].counterexample.differing() == [("Y", (0, 0), 39, 40)]


def test_junit_one_case_per_site():
    root = ET.fromstring(report_junit.render(sample_report()))
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.get("errors") == "1" and suite.get("skipped") == "1"
    cases = suite.findall("testcase")
    assert len(cases) == 4
    kinds = [[c.tag for c in case] for case in cases]
    assert kinds == [[], ["failure"], ["error"], ["skipped"]]
    assert cases[1].find("failure").get("type") == "refuted"
    assert "multiple_users" in cases[3].find("skipped").get("message")


def test_junit_escapes_markup_in_messages():
    site = SiteReport("s", "p", ("a<b",), Status.REJECTED, Reason("layout_mismatch", 'x & "y"'))
    root = ET.fromstring(report_junit.render(Report("m.onnx", "bitwise", "t", [site])))
    assert root.find("testsuite/testcase/skipped").get("message") == (
        f'[layout_mismatch] x & "y" (action: {site.reason.action})'
    )
