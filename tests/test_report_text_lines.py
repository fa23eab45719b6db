"""Short text lines (issue 26): one line per site within 160 characters (the reason in full
with its action in -v and JSON), counted nouns in the singular for one, no Markdown
backticks, no "HOST [refuted]" line beside a summary of 0 refuted, and an action that fits
the situation (a read-only gate's missing record says to record proofs, not to raise
--timeout)."""

from __future__ import annotations

import json

import onnx
import pytest
from cli_helpers import EXAMPLES, prover
from models import matmul_activation

from compiler.ir.reasons import Reason
from compiler.report import text
from compiler.report.model import Diagnostic, Report, SiteReport
from prover.verdict import ReasonCode, Status

LONG = "value 'x' " + "is used by a very long chain of graph outputs, " * 8 + "the end"


def _report() -> Report:
    sites = [
        SiteReport("site-0", "matmul+sigmoid", ("mm", "sig"), Status.REJECTED,
                   Reason(ReasonCode.MULTIPLE_USERS, LONG)),
        SiteReport("site-1", "matmul+transpose+sigmoid", tuple(f"n{i}" for i in range(9)),
                   Status.PROVEN),
    ]  # fmt: skip
    hosts = [
        Diagnostic(ReasonCode.REFUTED, ["lut"], "lut stays on the host: table obligation refuted"),
        *(Diagnostic(ReasonCode.UNSUPPORTED_OP, [f"op{i}"], f"node op{i} `Neg`") for i in range(5)),
    ]
    return Report("m.onnx", "bitwise", "npu_float", sites, host_ops=hosts)


def test_default_lines_are_short_and_verbose_has_everything():
    r = _report()
    short = text.render(r).splitlines()
    assert all(len(ln) <= text.WIDTH for ln in short), max(short, key=len)
    site0 = next(ln for ln in short if ln.startswith("REJECTED"))
    assert site0.endswith("...  0 ms") and "action:" not in site0
    assert "(n0,n1,...(+7))" in next(ln for ln in short if ln.startswith("PROVEN"))
    assert short[-2].startswith("(-v: every reason in full")
    assert short[-1] == "2 candidates: 1 proven, 0 refuted, 0 unknown, 1 rejected"
    full = text.render(r, verbose=True)
    assert LONG in full and f"action: {r.sites[0].reason.action}" in full
    assert "n0,n1,n2,n3,n4,n5,n6,n7,n8" in full


def test_host_lines_say_a_lowering_verdict_in_words_and_group_alike_ops():
    out = text.render(_report())
    assert "[refuted]" not in out and "HOST     lut  its NPU form was refuted" in out
    grouped = [ln for ln in out.splitlines() if "[unsupported_op]" in ln]
    assert grouped == ["HOST     [unsupported_op]: 5 ops: op0, op1, op2, op3, ... (+1)"]
    assert len([ln for ln in text.render(_report(), True).splitlines() if "op" in ln]) >= 5


def test_alike_findings_are_one_line_without_v():
    r = _report()
    r.findings = [
        {"code": "reference_divergence", "message": f"conv{i}: may saturate"} for i in range(5)
    ]
    lines = [ln for ln in text.render(r).splitlines() if ln.startswith("FINDING")]
    assert lines == ["FINDING  [reference_divergence] 5 findings; first: conv0: may saturate"]
    assert len([ln for ln in text.render(r, True).splitlines() if ln.startswith("FINDING")]) == 5


def test_no_backticks_and_one_candidate():
    r = _report()
    r.sites = r.sites[1:]
    out = text.render(r) + text.render(r, verbose=True)
    assert "`" not in out and "node op0 'Neg'" in out
    assert out.splitlines()[-1] == "1 candidate: 1 proven, 0 refuted, 0 unknown, 0 rejected"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("m") / "m.onnx"
    onnx.save(matmul_activation(), p)
    return str(p)


def test_a_read_only_gate_says_to_record_proofs(model, tmp_path):
    store = tmp_path / "proofs"
    store.mkdir()
    args = ("check", model, "--proofs", store, "--proofs-mode", "ro", "--no-progress")
    r = prover(*args, "-v")
    assert r.returncode == 5
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("UNKNOWN"))
    assert "[proof_missing]" in line and "record the proofs" in line
    assert "--timeout" not in r.stdout
    assert "`" not in r.stderr and "record them with: prover check" in r.stderr
    j = json.loads(prover(*args, "--format", "json").stdout)
    (site,) = j["sites"]
    assert site["reason"]["code"] == "proof_missing"
    assert "record the proofs" in site["reason"]["action"]


def test_showcase_lines_fit():
    r = prover("check", EXAMPLES / "showcase.onnx", "--proofs-mode", "off")
    lines = r.stdout.splitlines()[1:]  # the header names the reference in full
    assert all(len(ln) <= 160 for ln in lines), max(lines, key=len)
    assert "`" not in r.stdout and "[refuted]" not in r.stdout
