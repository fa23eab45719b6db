"""The JSON report: compact by default, `--indent N`, and the shipped schema validates every
report the tools write for every shipped example in every policy/target/reference
configuration (and rejects broken ones)."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import EXAMPLES, REPO
from report_fixtures import sample_report

from compiler.cli import npuc as cli_npuc
from compiler.cli import prover as cli_prover
from compiler.report import json_form as report_json
from prover.reference import PROFILES

MODELS = sorted(EXAMPLES.glob("*.onnx")) + sorted((EXAMPLES / "digits").glob("*.onnx"))
CONFIGS = [
    (policy, target) for policy in ("bitwise", "bounded:1") for target in ("npu_float", "npu_fixed")
]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    s = report_json.schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def _errors(validator, data) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]


def test_schema_is_shipped_as_package_data_and_versioned():
    s = report_json.schema()
    assert s["properties"]["schema_version"]["const"] == report_json.SCHEMA_VERSION
    assert f"report-{report_json.SCHEMA_VERSION}.json" in s["$id"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert (
        '"compiler.report" = ["schema.json"' in pyproject
    )  # installed with the package, not only in git
    assert report_json.report_json(sample_report())["schema_version"] == report_json.SCHEMA_VERSION


def _synthesis_check(kind: str, columns: list[int] | None = None) -> dict:
    group = {"columns": columns or [0, 3], "kind": kind, "message": "m"}
    return {"check": "requant_synthesis", "status": "held", "message": "m", "groups": [group]}


def test_a_requant_synthesis_check_validates(validator):
    data = json.loads(report_json.render(sample_report()))
    data["sites"][0]["checks"] = [_synthesis_check(k) for k in ("rounded", "synthesised")]
    assert _errors(validator, data) == []


def test_sample_report_validates(validator):
    assert _errors(validator, json.loads(report_json.render(sample_report()))) == []


@pytest.mark.parametrize(
    "break_it, where",
    [
        (lambda d: d.pop("summary"), "summary"),
        (lambda d: d["sites"][0].update(verdict="maybe"), "verdict"),
        (lambda d: d["sites"][1].pop("reason"), "reason"),  # refuted without a reason
        (lambda d: d["sites"][1].pop("counterexample"), "counterexample"),
        (lambda d: d["summary"].update(proven=-1), "proven"),
        (lambda d: d.update(policy="bounded"), "policy"),
        (lambda d: d["sites"][1]["counterexample"]["inputs"]["X"].pop("dtype"), "dtype"),
        (lambda d: d["sites"][1].update(obligation="xyz"), "obligation"),
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d["sites"][0].update(checks=[_synthesis_check("guessed")]), "group kind"),
        (lambda d: d["sites"][0].update(checks=[_synthesis_check("rounded", [3])]), "columns"),
    ],
)
def test_schema_rejects_broken_reports(validator, break_it, where):
    data = json.loads(report_json.render(sample_report()))
    bad = copy.deepcopy(data)
    break_it(bad)
    errs = _errors(validator, bad)
    assert errs, f"schema accepted a report with a broken {where}"


def test_json_is_compact_by_default_and_indent_pretty_prints(tmp_path):
    compact, pretty = tmp_path / "c.json", tmp_path / "p.json"
    showcase = str(EXAMPLES / "showcase.onnx")
    common = ["check", showcase, "--no-progress", "--format", "json"]
    assert cli_prover.main([*common, "-o", str(compact)]) == 1
    assert cli_prover.main([*common, "--indent", "2", "-o", str(pretty)]) == 1
    c, p = compact.read_text(), pretty.read_text()
    assert c.count("\n") == 1 and ", " not in c.split('"message"')[0]
    assert p.count("\n") > 50 and '\n  "sites": [' in p
    strip = lambda d: [{k: v for k, v in s.items() if k != "time_ms"} for s in d["sites"]]  # noqa: E731
    assert strip(json.loads(c)) == strip(json.loads(p))
    assert len(c) < len(p) / 2


def test_indent_rejects_a_negative_value(capsys):
    with pytest.raises(SystemExit) as e:
        cli_prover.main(["check", str(EXAMPLES / "showcase.onnx"), "--indent", "-1"])
    assert e.value.code == 2
    assert "must be >= 0" in capsys.readouterr().err


# By default every example and one digits model per form (QOperator per-channel, QDQ
# per-tensor, float); the other digits models (the per-channel ones synthesise parameters
# per group: about 12 s of CPU each) under -m slow.
DIGITS_SAMPLE = {
    "digits_gemm_qdq_s8s8_pt.onnx",
    "digits_matmul_float.onnx",
}


def _model_params() -> list:
    slow = [pytest.mark.slow]
    return [
        pytest.param(
            m,
            id=m.name,
            marks=slow if m.parent.name == "digits" and m.name not in DIGITS_SAMPLE else [],
        )
        for m in MODELS
    ]


@pytest.mark.parametrize("model", _model_params())
def test_every_shipped_example_report_validates(validator, model, tmp_path):
    """Every configuration's report validates; a model the frontend refuses writes none."""
    written = 0
    for policy, target in CONFIGS:
        out = tmp_path / f"{policy.replace(':', '_')}_{target}.json"
        args = ["check", str(model), "--policy", policy, "--target", target, "--no-progress"]
        code = cli_prover.main([*args, "--format", "json", "-o", str(out)])
        if code == 2:
            assert not out.exists()
            continue
        assert code in (0, 1, 3), code
        data = json.loads(out.read_text())
        assert _errors(validator, data) == [], (policy, target)
        assert data["policy"] == policy
        written += 1
    if model.parent == EXAMPLES:  # the top-level examples are all accepted today
        assert written == len(CONFIGS)


@pytest.mark.parametrize("reference", sorted(PROFILES))
def test_reports_under_every_reference_profile_validate(validator, reference, tmp_path):
    for name in ("showcase.onnx", "ort_quantized_matmul_sigmoid.onnx"):
        out = tmp_path / f"{name}.json"
        args = ["check", str(EXAMPLES / name), "--reference", reference, "--no-progress"]
        assert cli_prover.main([*args, "--format", "json", "-o", str(out)]) in (0, 1, 3)
        data = json.loads(out.read_text())
        assert _errors(validator, data) == []
        assert data["reference"]["name"] == reference


def test_npuc_report_validates_and_carries_the_ledger(validator, tmp_path):
    prog, rep = tmp_path / "s.npuprog", tmp_path / "r.json"
    showcase = str(EXAMPLES / "showcase.onnx")
    assert cli_npuc.main(["compile", showcase, "-o", str(prog), "--report", str(rep), "--no-progress"]) == 0  # fmt: skip
    text = rep.read_text()
    assert text.count("\n") == 1  # compact
    data = json.loads(text)
    assert _errors(validator, data) == []
    assert data["program"] == str(prog)
    proven = [s for s in data["sites"] if s["verdict"] == "proven"]
    assert proven and all("ledger" in s for s in proven)
    assert data["ledger"]["fusions"][0]["bytes_not_written"] > 0


def test_committed_example_json_reports_validate(validator):
    """Any JSON report committed in the repository (docs, examples) follows the schema."""
    found = [
        p
        for p in Path(REPO).glob("**/*report*.json")
        if ".git" not in p.parts and p != REPO / "compiler" / "report" / "schema.json"
    ]
    for p in found:
        data = json.loads(p.read_text())
        if isinstance(data, dict) and "sites" in data and "summary" in data:
            assert _errors(validator, data) == [], p


def test_session_hook_flags_exactly_the_invalid_reports():
    """The conftest hook (report_schema_hook) that validates every report the suite writes."""
    with tempfile.TemporaryDirectory() as d:  # not under tmp_path: the hook scans that itself
        _check_hook(Path(d))


def _check_hook(tmp_path: Path) -> None:
    from report_schema_hook import invalid_reports

    good = json.loads(report_json.render(sample_report()))
    bad = copy.deepcopy(good)
    bad["sites"][0]["verdict"] = "maybe"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "good.json").write_text(json.dumps(good))
    (tmp_path / "a" / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "other.json").write_text('{"not": "a report"}')
    (tmp_path / "corrupt.json").write_text('{"model": ')
    found = invalid_reports(tmp_path)
    assert len(found) == 1 and found[0].startswith(str(tmp_path / "a" / "bad.json"))
    assert "verdict" in found[0] or "maybe" in found[0]


def test_indent_with_another_format_is_bad_usage(tmp_path):
    from cli_helpers import assert_one_line_error, prover

    out = tmp_path / "r.md"
    p = prover("check", str(EXAMPLES / "showcase.onnx"), "--format", "markdown", "--indent", "2", "-o", str(out))  # fmt: skip
    assert_one_line_error(p, "--indent applies to --format json")
    assert not out.exists()


def test_npuc_indent_needs_a_json_report(tmp_path):
    from cli_helpers import assert_one_line_error, npuc

    prog = tmp_path / "p.npuprog"
    p = npuc("compile", str(EXAMPLES / "showcase.onnx"), "-o", str(prog), "--report", str(tmp_path / "r.html"), "--indent", "2")  # fmt: skip
    assert_one_line_error(p, "--indent applies to a JSON --report, not html")
    assert not prog.exists()
    rep = tmp_path / "r.json"
    p = npuc("compile", str(EXAMPLES / "showcase.onnx"), "-o", str(prog), "--report", str(rep), "--indent", "4", "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert '\n    "sites": [' in rep.read_text()
