"""JSON report (DESIGN.md "Commands and exit codes": model, policy, target, summary, sites)."""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib import resources
from typing import Any

import numpy as np

from compiler.report.model import Report, SiteReport, WholeModelCounterexample

SCHEMA_VERSION = 1  # of compiler/report/schema.json; bump with its $id on an incompatible change


def array_json(a: np.ndarray) -> dict[str, Any]:
    """An array as {"dtype", "shape", "data"} (data nested lists of Python numbers)."""
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.tolist()}


def array_from_json(j: dict[str, Any]) -> np.ndarray:
    """Inverse of `array_json`."""
    return np.asarray(j["data"], dtype=j["dtype"]).reshape(j["shape"])


def counterexample_json(c: WholeModelCounterexample) -> dict[str, Any]:
    """Whole-model inputs, both outputs, the local assignment and the .npz path if any."""
    out: dict[str, Any] = {
        "inputs": {k: array_json(v) for k, v in (c.inputs or {}).items()},
        "expected": {k: array_json(v) for k, v in (c.expected or {}).items()},
        "actual": {k: array_json(v) for k, v in (c.actual or {}).items()},
    }
    if c.assignment:
        out["local"] = {k: int(v) for k, v in c.assignment.items()}
    out["before"] = c.before
    if c.after is not None:
        out["after"] = c.after
    if c.npz:
        out["npz"] = c.npz
    return out


def site_json(s: SiteReport) -> dict[str, Any]:
    """One site in the DESIGN.md field names (extra fields are additive): the one JSON form
    of a site (`site_json(SiteReport.of(site))` for a compiler `Site`)."""
    out: dict[str, Any] = {
        "id": s.id,
        "pattern": s.pattern,
        "nodes": list(s.nodes),
        "verdict": s.verdict.value,
    }
    if s.reason is not None:
        out["reason"] = {"code": s.reason.code.value, "message": s.reason.message}
        if s.reason.action:
            out["reason"]["action"] = s.reason.action
    out["time_ms"] = round(float(s.time_ms), 3)
    if s.counterexample is not None:
        out["counterexample"] = counterexample_json(s.counterexample)
    if s.obligation_hash:
        out["obligation"] = s.obligation_hash
    if s.solver:
        out["solver"] = s.solver
    if s.max_diff is not None:
        out["max_diff"] = int(s.max_diff)
    if s.ledger is not None:
        out["ledger"] = s.ledger
    if s.checks:
        out["checks"] = [dict(c) for c in s.checks]
    return out


def report_json(r: Report) -> dict[str, Any]:
    """The whole report as a JSON-ready dict."""
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": r.model,
        "policy": r.policy,
        "target": r.target,
        "summary": asdict(r.summary),
        "sites": [site_json(s) for s in r.sites],
    }
    if r.reference is not None:
        out["reference"] = r.reference
    if r.findings:
        out["findings"] = r.findings
    if r.host_ops:
        out["host_ops"] = [d.to_dict() for d in r.host_ops]
    if r.macs is not None:
        out["macs"] = r.macs
    if r.baseline is not None:
        out["baseline"] = r.baseline
    if r.tool_version:
        out["tool"] = {"name": "prover", "version": r.tool_version}
    if r.ledger is not None:
        out["ledger"] = r.ledger
    if r.proof_records:
        out["proof_records"] = r.proof_records
    if r.proof_misses:
        out["proof_misses"] = r.proof_misses
    return out


def render(r: Report, indent: int | None = None) -> str:
    """The report as JSON text: compact unless `indent` is given (trailing newline)."""
    return dumps(report_json(r), indent)


def dumps(data: dict[str, Any], indent: int | None = None) -> str:
    """A report dict as JSON text: compact by default, pretty-printed with `indent`."""
    if indent is None:
        return json.dumps(data, separators=(",", ":"), default=_default) + "\n"
    return json.dumps(data, indent=indent, default=_default) + "\n"


def schema() -> dict[str, Any]:
    """The shipped JSON schema of the report (compiler/report/schema.json, SCHEMA_VERSION)."""
    text = resources.files("compiler.report").joinpath("schema.json").read_text("utf-8")
    return json.loads(text)


def _default(o: Any) -> Any:
    # numpy scalars and arrays that slipped into a ledger or reason
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
