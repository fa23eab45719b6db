"""`prover check --format github`: GitHub Actions workflow-command annotations.

Each finding is one `::LEVEL file=...,title=...::message` line whose escaped properties
and message decode back to the report's own text; model-controlled text never starts a
command of its own.
"""

from __future__ import annotations

import re

from cli_helpers import EXAMPLES, REPO, prover

from compiler.report.github import escape_data, escape_property, render
from compiler.report.model import Diagnostic, Reason, ReasonCode, Report, SiteReport, Status

COMMAND = re.compile(r"^::(error|warning|notice) file=([^,:]*),title=([^,:]*)::(.*)$")


def unescape(text: str) -> str:
    for enc, ch in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(enc, ch)
    return text


def annotations(out: str) -> list[tuple[str, str, str, str]]:
    """(level, file, title, message) per command line; every other line is the summary."""
    found = []
    lines = out.splitlines()
    for line in lines[:-1]:
        m = COMMAND.match(line)
        assert m, f"not a workflow command: {line!r}"
        level, file, title, message = m.groups()
        found.append((level, unescape(file), unescape(title), unescape(message)))
    assert lines[-1].startswith("prover: ") and "::" not in lines[-1][:2]
    return found


def test_showcase_annotations_per_verdict():
    r = prover("check", "examples/showcase.onnx", "--format", "github", cwd=REPO)
    assert r.returncode == 1, r.stderr
    found = annotations(r.stdout)
    levels = [a[0] for a in found]
    assert levels == ["error", "notice", "notice", "notice"]  # refuted, 2 rejected, host
    assert all(a[1] == "examples/showcase.onnx" for a in found)  # a repository path
    level, _, title, message = found[0]
    assert title == "prover: refuted matmul+sigmoid (mm_lut, sig_lut)"
    assert message.startswith("counterexample at acc=-6634: original 39, fused 40")
    assert "Action: " in message
    assert "[multiple_users]" in found[1][2] and "[layout_mismatch]" in found[2][2]
    assert r.stdout.splitlines()[-1] == (
        "prover: examples/showcase.onnx: 4 candidates: 1 proven, 1 refuted, 0 unknown, 2 rejected"
    )


def test_proven_model_prints_only_the_summary_with_a_singular():
    r = prover("check", str(EXAMPLES / "matmul_sigmoid.onnx"), "--format", "github", cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "prover: examples/matmul_sigmoid.onnx: 1 candidate: 1 proven, 0 refuted, 0 unknown, "
        "0 rejected\n"
    )


def test_float_model_is_a_warning_and_an_error_under_the_gate():
    model = "examples/digits/digits_matmul_float.onnx"
    plain = prover("check", model, "--format", "github", cwd=REPO)
    gate = prover("check", model, "--format", "github", "--require-quantized", cwd=REPO)
    assert (plain.returncode, gate.returncode) == (0, 7)
    for r, level in ((plain, "warning"), (gate, "error")):
        found = annotations(r.stdout)
        fc = [a for a in found if a[2] == "prover: float_compute"]
        assert len(fc) == 1 and fc[0][0] == level and "not quantized" in fc[0][3]
        host = [a for a in found if "on the host" in a[2]]
        assert len(host) == 1 and host[0][0] == "notice"  # one notice per reason code
        assert re.fullmatch(r"prover: \d+ ops on the host \[unsupported_op\]", host[0][2])
        assert "; also on the host for this reason: " in host[0][3]


def test_read_only_gate_miss_is_an_error(tmp_path):
    store = tmp_path / "proofs"
    store.mkdir()
    r = prover(
        "check", "examples/matmul_sigmoid.onnx", "--format", "github",
        "--proofs", str(store), "--proofs-mode", "ro", cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 5, r.stderr
    misses = [a for a in annotations(r.stdout) if a[2] == "prover: proof gate: no trusted record"]
    assert len(misses) == 3 and all(a[0] == "error" for a in misses)  # one per obligation
    assert all(a[3].startswith("no proof record for obligation ") for a in misses)


def _report(**kw) -> Report:
    return Report(model="m.onnx", policy="bitwise", target="npu_float", **{"sites": [], **kw})


def test_model_text_cannot_start_a_workflow_command():
    """Names with newlines, '::', '%', ',' and ':' stay inside one escaped line."""
    evil = "n\n::add-mask::secret%0A,x:y\r"
    site = SiteReport(
        "s1", "matmul+sigmoid", (evil,), Status.REJECTED,
        Reason(ReasonCode.MULTIPLE_USERS, f"value of {evil} is used twice"),
    )  # fmt: skip
    host = Diagnostic(ReasonCode.UNSUPPORTED_OP, [evil], f"node {evil} runs on the host")
    out = render(_report(sites=[site], host_ops=[host]))
    lines = out.splitlines()
    assert len(lines) == 3 and all(line.startswith(("::notice ", "prover: ")) for line in lines)
    found = annotations(out)
    # inert.visible writes the controls as escapes first; the rest survives the round trip
    assert "::add-mask::secret%0A,x:y" in found[0][2] and "\\x0a" in found[0][2]
    assert "\n" not in found[0][3] and "%0A" in found[0][3]


def test_worse_baseline_changes_and_unknown_sites():
    changes = [
        {"kind": "verdict", "worse": True, "where": "m.onnx s1", "message": "proven -> refuted"},
        {"kind": "new_site", "worse": False, "where": "m.onnx s2", "message": "new"},
    ]
    unknown = SiteReport("s3", "matmul+sigmoid", ("a", "b"), Status.UNKNOWN)
    found = annotations(render(_report(sites=[unknown], baseline={"changes": changes})))
    assert [(a[0], a[2]) for a in found] == [
        ("warning", "prover: unknown matmul+sigmoid (a, b)"),
        ("error", "prover: worse than baseline (verdict)"),
    ]
    assert found[1][3] == "m.onnx s1: proven -> refuted"


def test_escaping_matches_the_actions_toolkit():
    assert escape_data("a%b\r\nc:d,e") == "a%25b%0D%0Ac:d,e"
    assert escape_property("a%b\r\nc:d,e") == "a%25b%0D%0Ac%3Ad%2Ce"
