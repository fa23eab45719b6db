"""`prover check` end to end: every exit code and output format, run as a subprocess."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import (
    EXAMPLES,
    REPO,
    assert_one_line_error,
    prover,
    unknown_domain_model,
)

SHOWCASE = EXAMPLES / "showcase.onnx"
SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"


def store_files(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()] if d.exists() else []


# --- exit 0 / 1 / 3 and the text report -------------------------------------------------


def test_direct_matmul_sigmoid_proves_exit_0(tmp_path):
    proofs = tmp_path / "proofs"
    r = prover("check", EXAMPLES / "matmul_sigmoid.onnx", "--policy", "bitwise", "--proofs", proofs)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("PROVEN") and "(mm,sig)" in lines[1] and lines[1].endswith("ms")
    assert lines[-1] == "1 candidate: 1 proven, 0 refuted, 0 unknown, 0 rejected"
    assert r.stderr == ""  # no progress bar when stderr is not a terminal
    assert store_files(proofs), "rw mode records the proof"


def test_showcase_text_shows_every_outcome_exit_1():
    r = prover("check", SHOWCASE, "--proofs-mode", "off")
    assert r.returncode == 1, r.stderr
    out = r.stdout
    refuted = [ln for ln in out.splitlines() if ln.startswith("REFUTED")]
    assert len(refuted) == 1 and "(mm_lut,sig_lut)" in refuted[0]
    assert "counterexample at acc=-6634: original 39, fused 40" in refuted[0]
    assert "[multiple_users]" in out and "[layout_mismatch]" in out
    assert all(len(ln) <= 160 for ln in out.splitlines()[1:]), out
    assert out.splitlines()[-1] == "4 candidates: 1 proven, 1 refuted, 0 unknown, 2 rejected"


def test_bounded_1_proves_what_bitwise_refutes():
    r = prover("check", SHOWCASE, "--policy", "bounded:1", "--proofs-mode", "off")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 proven, 0 refuted" in r.stdout and "max difference 1" in r.stdout


def test_unknown_exit_3():
    """Read as the float graph, a QDQ MatMul accumulates in float32: no integer proof, so
    unknown (never a pass), with its own reason code and action. Read as the integer
    kernels ORT runs at its default level (the default reference), it is proven."""
    qdq = EXAMPLES / "ort_quantized_qdq_matmul_sigmoid.onnx"
    r = prover("check", qdq, "--proofs-mode", "off", "--reference", "onnx-qdq-float", "-v")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "UNKNOWN" in r.stdout and "0 proven, 0 refuted, 1 unknown" in r.stdout
    assert "[float_accumulation]" in r.stdout and "action: keep the QDQ group" in r.stdout
    r = prover("check", qdq, "--proofs-mode", "off")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 proven" in r.stdout and "integer kernels" in r.stdout.splitlines()[0]


# --- formats ----------------------------------------------------------------------------


def test_json_report_fields(tmp_path):
    out = tmp_path / "r.json"
    r = prover("check", SHOWCASE, "--format", "json", "-o", out, "--proofs-mode", "off")
    assert r.returncode == 1 and r.stdout == ""
    j = json.loads(out.read_text())
    assert j["model"] == str(SHOWCASE) and j["policy"] == "bitwise" and j["target"] == "npu_float"
    assert j["summary"] == {"candidates": 4, "proven": 1, "refuted": 1, "unknown": 0, "rejected": 2}
    for s in j["sites"]:
        assert {"id", "pattern", "nodes", "verdict", "time_ms"} <= set(s)
        assert ("reason" in s) == (s["verdict"] != "proven")
    (ref,) = [s for s in j["sites"] if s["verdict"] == "refuted"]
    cex = ref["counterexample"]
    assert set(cex["inputs"]) == {"X", "X4"} and cex["inputs"]["X"]["dtype"] == "int8"
    assert cex["expected"]["Y_lut"]["data"] != cex["actual"]["Y_lut"]["data"]
    assert ref["reason"]["code"] == "refuted"


def test_sarif_validates_against_the_official_schema():
    r = prover("check", SHOWCASE, "--format", "sarif", "--proofs-mode", "off")
    assert r.returncode == 1
    log = json.loads(r.stdout)
    validator = jsonschema.Draft4Validator(json.loads(SCHEMA.read_text()))
    errors = list(validator.iter_errors(log))
    assert not errors, errors[0].message
    run = log["runs"][0]
    sites = [x for x in run["results"] if "siteId/v1" in x["partialFingerprints"]]
    assert len(sites) == 3  # refuted + two rejected
    assert {r["ruleId"] for r in sites} == {"refuted", "multiple_users", "layout_mismatch"}
    # ops kept on the host are notes naming their ONNX node (the refuted table stays there)
    notes = [x for x in run["results"] if "hostOp/v1" in x["partialFingerprints"]]
    assert notes and all(x["level"] == "note" for x in notes)
    assert any("sig_lut" in x["message"]["text"] for x in notes)
    assert {x["id"] for x in run["tool"]["driver"]["rules"]} == {
        "refuted",
        "multiple_users",
        "layout_mismatch",
    }


def test_junit_one_testcase_per_site():
    r = prover("check", SHOWCASE, "--format", "junit", "--proofs-mode", "off")
    assert r.returncode == 1
    suite = ET.fromstring(r.stdout).find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 4 and suite.get("failures") == "1" and suite.get("skipped") == "2"
    assert sum(1 for c in cases if c.find("failure") is not None) == 1
    assert sum(1 for c in cases if c.find("skipped") is not None) == 2


# --- the CI gate (ro proof store) -------------------------------------------------------


def test_ro_gate_fails_on_missing_records_and_passes_once_recorded(tmp_path):
    proofs = tmp_path / "proofs"
    proofs.mkdir()
    model = EXAMPLES / "matmul_sigmoid.onnx"
    miss = prover("check", model, "--proofs", proofs, "--proofs-mode", "ro")
    assert miss.returncode == 5, miss.stderr  # its own exit code, not 3 (= unknown)
    assert "proof gate failed" in miss.stderr and "no proof record" in miss.stderr
    assert not store_files(proofs), "ro mode never writes"
    rw = prover("check", model, "--proofs", proofs)
    assert rw.returncode == 0 and store_files(proofs)
    ok = prover("check", model, "--proofs", proofs, "--proofs-mode", "ro")
    assert ok.returncode == 0, ok.stderr
    served = ok.stderr.splitlines()
    assert served and all(": re-decided by " in line for line in served), ok.stderr


# --- bad usage and bad input: one line, exit 2, nothing in the store ---------------------


@pytest.mark.parametrize(
    ("make", "extra", "needles"),
    [
        (lambda d: d / "missing.onnx", [], ["model file not found", "missing.onnx"]),
        (lambda d: _write(d / "text.onnx", b"not a model\n"), [], ["not a valid ONNX model"]),
        (lambda d: _write(d / "cut.onnx", SHOWCASE.read_bytes()[:700]), [], ["not a valid ONNX"]),
        (lambda d: unknown_domain_model(d / "dom.onnx"), [], ["com.example", "not supported"]),
        (lambda d: SHOWCASE, ["--policy", "bitwise2"], ["bad policy 'bitwise2'"]),
        (lambda d: SHOWCASE, ["--policy", "bounded:x"], ["bad policy"]),
        (lambda d: SHOWCASE, ["--target", "no/such/target.toml"], ["target file not found"]),
        (lambda d: SHOWCASE, ["--solver", "magic"], ["--solver", "invalid choice: 'magic'"]),
        (lambda d: SHOWCASE, ["--timeout", "0"], ["--timeout", "must be > 0"]),
        (lambda d: SHOWCASE, ["--format", "xml"], ["--format", "invalid choice"]),
    ],
    ids=[
        "missing",
        "not-onnx",
        "truncated",
        "unknown-domain",
        "bad-policy",
        "bad-bound",
        "unknown-target",
        "unknown-solver",
        "bad-timeout",
        "bad-format",
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, make, extra, needles):
    proofs = tmp_path / "proofs"
    r = prover("check", make(tmp_path), *extra, "--proofs", proofs)
    assert_one_line_error(r, *needles)
    assert not proofs.exists()
    assert r.stdout == ""


def test_bad_target_toml_is_exit_2(tmp_path):
    bad = _write(tmp_path / "t.toml", b"[target\nname = 1\n")
    assert_one_line_error(prover("check", SHOWCASE, "--target", bad), "not valid TOML")


def test_shipped_target_by_name_changes_the_verdict():
    """A fixed-point Requantize: rejected on the float32 target, proven on the fixed one."""
    model = EXAMPLES / "matmul_requantize_sigmoid.onnx"
    fixed = prover("check", model, "--target", "npu_fixed", "--proofs-mode", "off")
    assert fixed.returncode == 0 and "target npu_fixed" in fixed.stdout
    assert fixed.stdout.splitlines()[1].startswith("PROVEN")
    default = prover("check", model, "--proofs-mode", "off")
    assert default.returncode == 0 and "[intervening_requantize]" in default.stdout


def test_ro_without_store_directory_is_exit_2(tmp_path):
    r = prover("check", SHOWCASE, "--proofs", tmp_path / "nope", "--proofs-mode", "ro")
    assert_one_line_error(r, "proof store not found")


# --- version, help, internal errors -----------------------------------------------------


def test_version_and_help():
    v = prover("--version")
    assert v.returncode == 0 and v.stdout.startswith("prover ")
    h = prover("check", "--help")
    assert h.returncode == 0
    for flag in ("--policy", "--target", "--format", "--emit-tests", "--proofs-mode", "--jobs"):
        assert flag in h.stdout
    assert "exit codes" in h.stdout


def _crash(*flags: str):
    """Run the real `main` with the compiler forced to raise an unexpected error."""
    import subprocess

    code = (
        "import sys, compiler.api as a\n"
        "def boom(*args, **kw): raise RuntimeError('boom inside the compiler')\n"
        "a.compile_model = boom\n"
        "from compiler.cli.prover import main\n"
        f"sys.exit(main(['check', {str(SHOWCASE)!r}, '--proofs-mode', 'off', *{list(flags)!r}]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_internal_error_exit_4_points_at_debug():
    r = _crash()
    assert_one_line_error(r, "internal error", "boom inside the compiler", "--debug", code=4)
    d = _crash("--debug")
    assert d.returncode == 4 and "Traceback" in d.stderr


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p
