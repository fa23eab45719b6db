"""SARIF writer: valid against the official OASIS SARIF 2.1.0 schema, one result per unproven site."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from report_fixtures import sample_report

from compiler.report import sarif as report_sarif
from compiler.report.model import Report, SiteReport

SCHEMA_PATH = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def test_sample_report_validates(validator):
    log = json.loads(report_sarif.render(sample_report()))
    errors = sorted(validator.iter_errors(log), key=str)
    assert not errors, errors[0].message


def test_schema_catches_a_broken_log(validator):
    """The validator is not vacuous: a result without a message fails."""
    log = report_sarif.sarif_log(sample_report())
    bad = copy.deepcopy(log)
    del bad["runs"][0]["results"][0]["message"]
    assert list(validator.iter_errors(bad))
    bad = copy.deepcopy(log)
    bad["runs"][0]["results"][0]["level"] = "fatal"
    assert list(validator.iter_errors(bad))


def test_one_result_per_unproven_site_and_rules_listed():
    log = report_sarif.sarif_log(sample_report())
    run = log["runs"][0]
    results = run["results"]
    assert [r["properties"]["site"] for r in results] == ["s1", "s2", "s3"]
    assert [r["level"] for r in results] == ["error", "warning", "note"]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == ["refuted", "unknown", "multiple_users"]
    for r in results:
        assert rule_ids[r["ruleIndex"]] == r["ruleId"]
        names = [loc["name"] for loc in r["locations"][0]["logicalLocations"]]
        assert names and set(names) <= {
            "mm_lut",
            "sig_lut",
            "mm_u",
            "sig_u",
            "mm_shared",
            "sig_shared",
        }
    assert "expected 39 got 40" in results[0]["message"]["text"]


def test_all_proven_gives_no_results(validator):
    r = Report("m.onnx", "bitwise", "t", [SiteReport("s0", "p", ("a",), "proven")])
    log = report_sarif.sarif_log(r)
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []
    assert not list(validator.iter_errors(log))


def test_model_outside_cwd_gets_an_absolute_uri(validator, tmp_path):
    log = report_sarif.sarif_log(sample_report(str(tmp_path / "x.onnx")))
    loc = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc["uri"].startswith("file://") and "uriBaseId" not in loc
    assert not list(validator.iter_errors(log))
