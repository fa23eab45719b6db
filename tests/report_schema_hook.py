"""pytest plugin: at the end of the session, every JSON report any test wrote under the
session's temporary directory (`tmp_path`, in process or through a subprocess) is validated
against the shipped schema; an invalid one fails the run, naming the file and the error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPORT_KEYS = ("model", "policy", "target", "summary", "sites")


def invalid_reports(root: Path) -> list[str]:
    """'path: error' for every JSON report under `root` that the schema rejects."""
    import jsonschema

    from compiler.report.json_form import schema

    validator = jsonschema.Draft202012Validator(schema())
    out = []
    for p in sorted(root.rglob("*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # not JSON (or deliberately corrupt): not a report
        if not isinstance(data, dict) or not all(k in data for k in REPORT_KEYS):
            continue
        errs = list(validator.iter_errors(data))
        if errs:
            e = errs[0]
            out.append(f"{p}: {list(e.absolute_path)}: {e.message[:200]}")
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or getattr(factory, "_basetemp", None) is None:
        return  # no test asked for a temporary directory
    bad = invalid_reports(factory.getbasetemp())
    if bad:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [
            f"{len(bad)} JSON report(s) written by tests do not match compiler/report/schema.json:",
            *bad,
        ]
        if tr is not None:
            tr.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
